package session

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/zkrecipes/zkrecipes/internal/wire"
)

// probeTimeout bounds each four-letter word of a probe.
const probeTimeout = 2 * time.Second

// prober asks a server, with four-letter words on a connection of their
// own, what the proof of contact needs to know: its role ("srvr", which
// every server answers) and, when it will say, its tickTime ("conf", which
// servers answer only when whitelisted). Over TLS it speaks TLS, as the
// secure client port wants.
type prober struct {
	tls        *tls.Config              // nil: plaintext
	serverName func(addr string) string // the host a resolved address was given as (TLS)
}

func (p prober) probe(ctx context.Context, addr string) (wire.Mode, time.Duration) {
	srvr, err := p.ask(ctx, addr, "srvr")
	if err != nil {
		return wire.ModeUnknown, 0
	}
	mode := wire.ParseMode(field(srvr, "Mode:"))
	if mode == wire.ModeStandalone {
		return mode, 0 // a standalone server needs no window
	}
	conf, err := p.ask(ctx, addr, "conf")
	if err != nil {
		return mode, 0
	}
	ms, err := strconv.Atoi(field(conf, "tickTime="))
	if err != nil || ms <= 0 {
		return mode, 0
	}
	return mode, time.Duration(ms) * time.Millisecond
}

// ask sends one four-letter word and reads the whole answer.
func (p prober) ask(ctx context.Context, addr, word string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var d interface {
		DialContext(ctx context.Context, network, addr string) (net.Conn, error)
	} = &net.Dialer{}
	if p.tls != nil {
		cfg := p.tls.Clone()
		if cfg.ServerName == "" && p.serverName != nil {
			cfg.ServerName = p.serverName(addr)
		}
		d = &tls.Dialer{Config: cfg} // verified as the session's own connections are
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if _, err := io.WriteString(conn, word); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(conn, 64<<10))
	return string(b), err
}

// field returns the value after prefix on its line of a four-letter answer.
func field(answer, prefix string) string {
	for line := range strings.Lines(answer) {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
