package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	"github.com/zkrecipes/zkrecipes/zklock"
)

// holders is `zklock holders`: list a lock's contenders.
func (c *cli) holders(args []string) (int, error) {
	c.listing = true
	path, err := c.onePath("holders", args)
	if err != nil {
		return exitUsage, err
	}

	ctx, m, done, err := openUntilSignal(c, path, zklock.NewMutex)
	if err != nil {
		return exitFailure, err
	}
	defer done()
	cs, err := m.Contenders(ctx)
	if err != nil {
		return exitFailure, err
	}
	if c.json {
		out := jsonHolders{Path: path, Contenders: []jsonContender{}}
		for i, cn := range cs {
			out.Contenders = append(out.Contenders, contenderJSON(cn, i, 1))
		}
		return c.printJSON(exitOK, out)
	}
	if len(cs) == 0 {
		fmt.Fprintf(c.stdout, "%s: no holder, no waiters\n", path)
		return exitOK, nil
	}
	printContenders(c.stdout, cs, true)
	return exitOK, nil
}

// printContenders prints a lock's line as a table, holder first, with each
// node's full path or only its name.
func printContenders(w io.Writer, cs []zklock.Contender, fullPath bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tNODE\tSESSION\tTOKEN\tDATA")
	for i, c := range cs {
		role := "holder"
		if i > 0 {
			role = "waiter " + strconv.Itoa(i)
		}
		node := c.Path
		if !fullPath {
			node = node[strings.LastIndex(node, "/")+1:]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", role, node, sessionID(c.SessionID), c.Token, printable(c.Data))
	}
	tw.Flush()
}

// printable shows node data as is when it is printable text, else quoted.
func printable(b []byte) string {
	s := string(b)
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// onePath parses the arguments of a command that takes one lock PATH and
// no flags of its own.
func (c *cli) onePath(name string, args []string) (string, error) {
	fs := c.flagSet(name)
	if err := c.parse(fs, args, name+" PATH"); err != nil {
		return "", err
	}
	if fs.NArg() != 1 {
		return "", usagef("%s: want one PATH, got %d arguments", name, fs.NArg())
	}
	path := fs.Arg(0)
	if err := checkPath(path); err != nil {
		return "", usagef("%s: %v", name, err)
	}
	return path, nil
}
