#!/bin/sh
# The docker provider's fast reset for an image whose agent cannot do it (POST /coda/restore,
# CODA_GUEST_HOME_TEMPLATE unset or an older agent), run as root in a desktop container after
# the guest agent closed every application it started; at image build too: the home directory
# becomes a fresh copy of the template
# (/opt/coda/home, the local provider's home template), and what the desktop user left in the
# temporary directories goes, except the X server's socket and lock and the agent's own files.
set -eu
home=/home/user
find "$home" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
cp -a /opt/coda/home/. "$home/"
chown -Rh user:user "$home"  # -h: a link is changed, never what it points to
for dir in /tmp /var/tmp /dev/shm; do
  [ -d "$dir" ] || continue
  find "$dir" -mindepth 1 -maxdepth 1 -user user ! -name .X11-unix ! -name '.X*-lock' \
    ! -name 'coda-guest-*' -exec rm -rf {} +
done
