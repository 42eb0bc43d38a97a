// Command coda-vcsim serves VMware's vSphere API simulator (vcsim, the "simulator" package of
// govmomi) for the project's tests, benchmarks and developers. It is built offline by
// scripts/vcsim.sh from Debian's govmomi sources (golang-github-vmware-govmomi-dev 0.24),
// which ship the simulator library but no vcsim command.
//
// The inventory is the simulator's vCenter model (datacenter DC0, a cluster DC0_C0 with three
// hosts, a host DC0_H0, a datastore LocalDS_0) with -vms VMs per resource pool (default none:
// callers create what they use). It answers https with a self-signed certificate made at start
// (ECDSA P-256, names 127.0.0.1, ::1 and localhost), written as PEM to -cert, as a vCenter
// answers with its own CA's certificate; -http serves plain http instead.
//
// A VM whose extraConfig has RUN.container runs a container: power on is `docker run` (then
// `docker start`), power off `docker stop`, destroy `docker rm` and the VM's guestinfo.* keys
// become VMX_GUESTINFO_* variables of the container. Before the container the simulator writes
// DMI files with `docker run <tar image> tar`: -tar-image names that image (VCSIM_BUSYBOX,
// default coda-base/debian:bookworm, built from Debian's packages by scripts/docker-base.sh),
// so no image named busybox is needed.
//
// Credentials come from the environment (never the command line): VCSIM_USERNAME and
// VCSIM_PASSWORD; without them any non-empty user and password log in. With
// VCSIM_PASSWORD_FILE the password is read from that file instead, at start and again at every
// SIGHUP: a password changed while the simulator runs, as a vCenter's password rotation (the
// sessions already open stay; the next login needs the new one). The simulator's own log lines
// (stderr) have guestinfo values redacted.
//
// Once serving it prints one JSON line on stdout, {"url": ..., "cert": ..., "pid": ...}, and
// writes the same to -ready when given (created whole, by a rename: its presence means ready).
// SIGTERM or SIGINT stops it; it then removes the containers of its VMs and its temporary
// datastores, and exits 0.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/vmware/govmomi/simulator"
)

var guestinfo = regexp.MustCompile(`(VMX_GUESTINFO_[A-Z0-9_]*)=\S*`)

// redacting keeps guestinfo values (the desktops' tokens) out of the simulator's log.
type redacting struct{ out io.Writer }

func (r redacting) Write(p []byte) (int, error) {
	_, err := r.out.Write(guestinfo.ReplaceAll(p, []byte("$1=<redacted>")))
	return len(p), err
}

// selfSigned makes a certificate for the loopback names and writes it (PEM) to path.
func selfSigned(path string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "coda-vcsim", Organization: []string{"CODA vcsim"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if path != "" {
		block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if err := os.WriteFile(path, block, 0o644); err != nil {
			return tls.Certificate{}, err
		}
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on (port 0: a free one)")
	certPath := flag.String("cert", "", "write the server's certificate (PEM) here")
	plain := flag.Bool("http", false, "serve plain http instead of https")
	vms := flag.Int("vms", 0, "VMs the model creates per resource pool")
	ready := flag.String("ready", "", "write the JSON line here too once serving")
	tarImage := flag.String("tar-image", "", "image with tar for the DMI files "+
		"(default $VCSIM_BUSYBOX, else coda-base/debian:bookworm)")
	flag.Parse()
	log.SetOutput(redacting{os.Stderr})

	image := *tarImage
	if image == "" {
		image = os.Getenv("VCSIM_BUSYBOX")
	}
	if image == "" {
		image = "coda-base/debian:bookworm"
	}
	os.Setenv("VCSIM_BUSYBOX", image)

	model := simulator.VPX()
	model.Machine = *vms
	if err := model.Create(); err != nil {
		log.Fatalf("coda-vcsim: creating the model: %s", err)
	}
	u := &url.URL{Host: *listen}
	user := os.Getenv("VCSIM_USERNAME")
	password := func() string {
		file := os.Getenv("VCSIM_PASSWORD_FILE")
		if file == "" {
			return os.Getenv("VCSIM_PASSWORD")
		}
		data, err := os.ReadFile(file)
		if err != nil {
			log.Fatalf("coda-vcsim: VCSIM_PASSWORD_FILE: %s", err)
		}
		return strings.TrimRight(string(data), "\r\n")
	}
	if user != "" {
		u.User = url.UserPassword(user, password())
	}
	model.Service.Listen = u
	rotate := make(chan os.Signal, 1)
	signal.Notify(rotate, syscall.SIGHUP)
	go func() {
		for range rotate {
			if user != "" { // the server's URL, which NewServer made anew from u
				model.Service.Listen.User = url.UserPassword(user, password())
				log.Printf("coda-vcsim: password of %s changed", user)
			}
		}
	}()
	if !*plain {
		cert, err := selfSigned(*certPath)
		if err != nil {
			model.Remove()
			log.Fatalf("coda-vcsim: certificate: %s", err)
		}
		model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	server := model.Service.NewServer()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	served := *server.URL
	served.User = nil
	line, _ := json.Marshal(map[string]interface{}{
		"url": served.String(), "cert": *certPath, "pid": os.Getpid(), "tar_image": image})
	fmt.Println(string(line))
	if *ready != "" {
		tmp := *ready + ".tmp"
		err := os.WriteFile(tmp, append(line, '\n'), 0o644)
		if err == nil {
			err = os.Rename(tmp, *ready)
		}
		if err != nil {
			server.Close()
			model.Remove()
			log.Fatalf("coda-vcsim: -ready: %s", err)
		}
	}

	<-stop
	server.Close()
	model.Remove()
}
