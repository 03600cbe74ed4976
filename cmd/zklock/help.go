package main

import "fmt"

// help is `zklock help [COMMAND [SUBCOMMAND]]`: the usage, or a command's
// flags, on stdout.
func (c *cli) help(args []string) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(c.stdout, usage)
		return exitOK, nil
	}
	switch args[0] {
	case "help":
		fmt.Fprintln(c.stdout, "Usage: zklock help [COMMAND [SUBCOMMAND]]")
		return exitOK, nil
	case "version":
		fmt.Fprintln(c.stdout, "Usage: zklock version")
		return exitOK, nil
	}
	if len(args) > 2 || (len(args) == 2 && args[0] != "queue") {
		return exitUsage, usagef("help: want a COMMAND (and for queue a SUBCOMMAND), got %q", args)
	}
	// A command asked for -h prints its synopsis and flags where it
	// prints its usage, on stderr: here that is stdout.
	stderr := c.stderr
	c.stderr = c.stdout
	defer func() { c.stderr = stderr }()
	return c.dispatch(append(args, "-h")) // a flagError of flag.ErrHelp: status 0
}
