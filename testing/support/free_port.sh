# Sourced by the tests that run a server and its client on this host.
# free_port prints a TCP port on 127.0.0.1 that the kernel just handed out. Tests run side by side,
# each in a PID namespace of its own where $$ repeats, so a port derived from the PID can be
# another test's.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
