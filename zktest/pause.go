package zktest

import "syscall"

// Pause stops a server made by [StartPrivate] with SIGSTOP, as a machine
// that hangs: its connections stay open, nothing is answered, and no
// session expires meanwhile (the server's own clock stops with it). Its
// clients hear nothing, and must notice. [Server.Resume] lets it go on;
// [Server.Stop], [Server.Restart] and the test's end kill it, paused or
// not. On a server from [Start] the test fails.
func (s *Server) Pause() { s.signal("Pause", syscall.SIGSTOP) }

// Resume lets a server stopped by [Server.Pause] go on. On a server that
// is not paused it does nothing.
func (s *Server) Resume() { s.signal("Resume", syscall.SIGCONT) }

func (s *Server) signal(method string, sig syscall.Signal) {
	s.t.Helper()
	n := s.private(method)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !n.running() {
		s.t.Fatalf("zktest: %s: the server is not running", method)
	}
	// The JVM leads its process group (see node.start).
	if err := syscall.Kill(-n.pid, sig); err != nil {
		s.t.Fatalf("zktest: %s: %v", method, err)
	}
}
