package zkrecipes

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// defaultPort is ZooKeeper's client port, for an address without one.
const defaultPort = "2181"

// parseServers reads Connect's servers as the Java client reads a connect
// string: each an address ("host", "host:port", "[v6addr]:port"), or
// several joined by commas; the last may be followed by a chroot
// ("zk1:2181,zk2:2181/app"). It returns "host:port" addresses, the chroot
// ("" for none; "/" is none), and an error, wrapping ErrInvalidArgument,
// for each address it cannot read, which it names.
func parseServers(servers []string) (addrs []string, chroot string, errs []error) {
	if len(servers) == 0 {
		return nil, "", []error{fmt.Errorf("zkrecipes: %w: no ZooKeeper servers given", ErrInvalidArgument)}
	}
	bad := func(addr, why string) {
		errs = append(errs, fmt.Errorf("zkrecipes: %w: server address %q: %s", ErrInvalidArgument, addr, why))
	}
	var all []string
	for _, s := range servers {
		all = append(all, strings.Split(s, ",")...)
	}
	for i, a := range all {
		a = strings.TrimSpace(a)
		if a == "" {
			errs = append(errs, fmt.Errorf("zkrecipes: %w: empty server address in %q", ErrInvalidArgument, strings.Join(servers, ",")))
			continue
		}
		if strings.Contains(a, "://") {
			bad(a, "a URL; want host:port")
			continue
		}
		if slash := strings.IndexByte(a, '/'); slash >= 0 {
			if i != len(all)-1 {
				bad(a, fmt.Sprintf("a chroot (%q) may only follow the last address", a[slash:]))
				continue
			}
			root := a[slash:]
			a = a[:slash]
			if root != "/" {
				if err := ValidatePath(root); err != nil {
					errs = append(errs, fmt.Errorf("zkrecipes: %w: chroot in %q: %w", ErrInvalidArgument, all[i], err))
				}
				chroot = root
			}
			if a == "" {
				bad(all[i], "no host before the chroot")
				continue
			}
		}
		host, port, why := splitAddr(a)
		if why != "" {
			bad(a, why)
			continue
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, chroot, errs
}

// splitAddr splits "host", "host:port", "[v6addr]" or "[v6addr]:port",
// with 2181 for a port not given; why says what is wrong, if anything.
func splitAddr(a string) (host, port, why string) {
	port = defaultPort
	switch {
	case strings.HasPrefix(a, "["):
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", "", "no ']' after an IPv6 address"
		}
		host = a[1:end]
		if ip := net.ParseIP(strings.Split(host, "%")[0]); ip == nil || !strings.Contains(host, ":") {
			return "", "", "not an IPv6 address in brackets"
		}
		switch rest := a[end+1:]; {
		case rest == "":
		case strings.HasPrefix(rest, ":"):
			port = rest[1:]
		default:
			return "", "", "want [v6addr]:port"
		}
	case strings.Count(a, ":") > 1:
		return "", "", "an IPv6 address needs brackets: [addr]:port"
	case strings.Contains(a, ":"):
		host, port, _ = strings.Cut(a, ":")
	default:
		host = a
	}
	if host == "" {
		return "", "", "no host"
	}
	if strings.ContainsAny(host, " \t@?#") {
		return "", "", "not a host name"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port != strconv.Itoa(n) {
		return "", "", fmt.Sprintf("port %q is not a number from 1 to 65535", port)
	}
	return host, port, ""
}
