"""Task generation (auto exploration): new instructions from seed tasks, deduplicated and
optionally screened by the judge."""
