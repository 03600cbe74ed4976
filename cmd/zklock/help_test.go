package main

import (
	"context"
	"encoding/json"
	"go/parser"
	"go/token"
	"maps"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// helpOut runs `zklock help args...`, which must exit 0 and print on
// stdout only.
func helpOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"help"}, args...)...)
	var out, errs strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errs
	if err := cmd.Run(); err != nil || errs.Len() > 0 {
		t.Fatalf("zklock help %q: %v; stderr:\n%s", args, err, errs.String())
	}
	return out.String()
}

// flagNames are the flags named at the start of lines ("  -name ...").
func flagNames(text string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^ {2}-([a-z-]+)`).FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	return names
}

// section is the part of text from the line starting with title to the
// next blank line.
func section(t *testing.T, text, title string) string {
	t.Helper()
	i := strings.Index(text, "\n"+title)
	if i < 0 {
		t.Fatalf("no %q section in:\n%s", title, text)
	}
	s := text[i+1:]
	if j := strings.Index(s, "\n\n"); j >= 0 {
		s = s[:j]
	}
	return s
}

// TestHelpListsEveryFlag: `zklock help` prints the usage on stdout, and
// for each command the flags its synopsis and the common flags name are
// exactly the flags `zklock help COMMAND` says it takes (-json only for
// the commands the usage lists it for); the package doc (go doc
// ./cmd/zklock) names them all too.
func TestHelpListsEveryFlag(t *testing.T) {
	t.Parallel()
	usageText := helpOut(t)
	if usageText != usage {
		t.Errorf("zklock help printed:\n%s\nwant the usage", usageText)
	}
	common := flagNames(section(t, usageText, "Common flags"))
	common = append(common, flagNames(section(t, usageText, "Secured ensembles"))...)
	for _, want := range []string{"zk", "json", "tls", "ca-file", "client-cert", "client-key", "tls-server-name", "auth"} {
		if !slices.Contains(common, want) {
			t.Errorf("help lists no common flag -%s; it lists %q", want, common)
		}
	}

	// The synopses: "  run [-timeout D] ... PATH", "  queue take [-once] ..."
	// and their continuation lines.
	commands := section(t, usageText, "Commands:")
	synopses := map[string][]string{}
	var last string
	for _, line := range strings.Split(commands, "\n")[1:] {
		m := regexp.MustCompile(`^ {2}((?:queue )?[a-z]+)\b(.*)$`).FindStringSubmatch(line)
		switch {
		case m != nil:
			last = m[1]
			synopses[last] = nil
			line = m[2]
		case !strings.HasPrefix(strings.TrimSpace(line), "["):
			continue // a description, not a synopsis going on
		}
		for _, f := range regexp.MustCompile(`\[-([a-z][a-z-]*)`).FindAllStringSubmatch(line, -1) {
			synopses[last] = append(synopses[last], f[1])
		}
	}
	wantCommands := []string{"demo", "holders", "lead", "leader", "queue dead", "queue ls", "queue put", "queue requeue", "queue take", "run", "watch"}
	if got := slices.Sorted(maps.Keys(synopses)); !slices.Equal(got, wantCommands) {
		t.Fatalf("help lists the commands %q, want %q", got, wantCommands)
	}

	listings := jsonCommands(t)
	doc := packageDoc(t)
	for _, f := range common {
		if !strings.Contains(doc, "-"+f+" ") {
			t.Errorf("the package doc does not document the common flag -%s", f)
		}
	}
	for name, own := range synopses {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			out := helpOut(t, strings.Fields(name)...)
			if !strings.HasPrefix(out, "Usage: zklock "+name) {
				t.Errorf("zklock help %s printed:\n%s", name, out)
			}
			got := flagNames(out)
			want := append(slices.Clone(common), own...)
			if !slices.Contains(listings, name) {
				want = slices.DeleteFunc(want, func(f string) bool { return f == "json" })
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s takes the flags %q; help documents %q", name, got, want)
			}
			synopsis := regexp.MustCompile(`(?m)^//\t` + regexp.QuoteMeta(name) + `\b.*$`).FindString(doc)
			for _, f := range own {
				if !strings.Contains(synopsis, "[-"+f) {
					t.Errorf("the package doc's synopsis of %s (%q) lacks -%s", name, synopsis, f)
				}
			}
		})
	}
	if !strings.Contains(usageText, strconv.Itoa(zkrecipes.MaxDataSize)+" bytes") {
		t.Errorf("help does not give queue put's limit, %d bytes", zkrecipes.MaxDataSize)
	}
}

// packageDoc is the package doc comment, as it stands in main.go.
func packageDoc(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "main.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil || f.Doc == nil {
		t.Fatalf("main.go: %v, or no package doc", err)
	}
	var b strings.Builder
	for _, c := range f.Doc.List {
		b.WriteString(c.Text + "\n")
	}
	return b.String()
}

// TestVersion: zklock version, -version and --version print the versions
// of zklock's module and of the library the binary was built with, as the
// build recorded them, and Go's.
func TestVersion(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "version", "-m", binary(t)).Output()
	if err != nil {
		t.Fatal(err)
	}
	mod := regexp.MustCompile(`(?m)^\tmod\tgithub\.com/zkrecipes/zkrecipes/cmd/zklock\t(\S+)`).FindSubmatch(out)
	dep := regexp.MustCompile(`(?m)^\tdep\tgithub\.com/zkrecipes/zkrecipes\t(\S+).*\n(?:\t=>\t(\S+)\t(\S+))?`).FindSubmatch(out)
	goVersion := regexp.MustCompile(`^\S+: (\S+)`).FindSubmatch(out)
	if mod == nil || dep == nil || goVersion == nil {
		t.Fatalf("go version -m: no main module, library or Go version in\n%s", out)
	}
	lib := string(dep[1])
	if len(dep[2]) > 0 {
		lib += " => " + string(dep[2]) + " " + string(dep[3])
	}
	want := "zklock version: " + string(mod[1]) + "\nzkrecipes version: " + lib + "\ngo version: " + string(goVersion[1]) + "\n"
	if got := helpOut(t, "version"); got != "Usage: zklock version\n" {
		t.Errorf("help version printed %q", got)
	}
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		cmd := exec.Command(binary(t), args...)
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("zklock %s: %v", args, err)
		}
		if string(got) != want {
			t.Errorf("zklock %s printed %q, want %q", args, got, want)
		}
	}
}

// TestHelpQueue: help queue, and queue -h, list the subcommands, as the
// usage does.
func TestHelpQueue(t *testing.T) {
	t.Parallel()
	out := helpOut(t, "queue")
	cmd := exec.Command(binary(t), "queue", "-h")
	var errs strings.Builder
	cmd.Stderr = &errs
	if err := cmd.Run(); err != nil {
		t.Errorf("zklock queue -h: %v", err)
	}
	for _, text := range []string{out, errs.String()} {
		if !strings.HasPrefix(text, "Usage: zklock queue SUBCOMMAND") {
			t.Errorf("help queue printed:\n%s", text)
		}
		for _, sub := range []string{"put", "take", "ls", "dead", "requeue"} {
			if !strings.Contains(text, "\n  queue "+sub+" ") {
				t.Errorf("help queue does not list queue %s:\n%s", sub, text)
			}
		}
	}
}

// jsonCommands are the commands the usage says -json is for.
func jsonCommands(t *testing.T) []string {
	t.Helper()
	text := section(t, usage, "  -json")
	if i := strings.Index(text, "\n  -"); i >= 0 { // the next flag
		text = text[:i]
	}
	text = text[strings.Index(text, ":")+1:]
	var listed []string
	for _, f := range strings.Split(text, ",") {
		listed = append(listed, strings.Join(strings.Fields(f), " "))
	}
	if len(listed) < 7 {
		t.Fatalf("help lists %q for -json", listed)
	}
	return listed
}

// TestJSONWhereHelpSays: every command help lists for -json prints one
// JSON object with -json, given before the command or after it.
func TestJSONWhereHelpSays(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	listed := jsonCommands(t)

	// Something to list: an election with a leader, a queue with an item.
	election, queue := lockPath(t), lockPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := zkrecipes.Connect(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	el, err := zklock.NewElection(s, election)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := el.Campaign(ctx, []byte("leader")); err != nil {
		t.Fatal(err)
	}
	run(t, addr, 0, "queue", "put", queue, "item")

	args := map[string][]string{
		"holders":       {"holders", election},
		"leader":        {"leader", election},
		"watch":         {"watch", "-once", election},
		"queue put":     {"queue", "put", queue, "another"},
		"queue ls":      {"queue", "ls", queue},
		"queue dead":    {"queue", "dead", queue},
		"queue requeue": {"queue", "requeue", queue, "0000000000-0000000000"}, // no such dead letter: 3
	}
	for _, name := range listed {
		a, ok := args[name]
		if !ok {
			t.Errorf("help lists %q for -json: no such command here", name)
			continue
		}
		want := 0
		if name == "queue requeue" {
			want = exitNoDeadLetter
		}
		n := len(strings.Fields(name))
		before := append([]string{"-json"}, a...)
		after := append(append(slices.Clone(a[:n]), "-json"), a[n:]...)
		for _, argv := range [][]string{before, after} {
			out := run(t, addr, want, argv...)
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil || v["path"] == nil {
				t.Errorf("zklock %q printed %q: %v; want a JSON object with a path", argv, out, err)
			}
		}
	}
}

// TestExitStatusNamesRealFlags: where the usage's exit statuses name a flag
// beside commands ("queue take: -timeout passed"), each of those commands
// takes that flag (the text once gave watch a -timeout it refuses).
func TestExitStatusNamesRealFlags(t *testing.T) {
	t.Parallel()
	text := usage[strings.Index(usage, "\nExit status:"):]
	// An entry runs from its status to the next; its clauses are split by
	// ';' and the commands in a clause are named before its ':'.
	entries := regexp.MustCompile(`(?m)^  \d`).Split(text, -1)
	commands := []string{"queue put", "queue take", "queue ls", "queue dead", "queue requeue", "holders", "watch", "leader", "lead", "run", "demo"}
	checked := 0
	for _, entry := range entries {
		entry = strings.Join(strings.Fields(entry), " ")
		for _, clause := range strings.Split(entry, ";") {
			names, rest, ok := strings.Cut(clause, ":")
			if !ok {
				continue
			}
			flags := regexp.MustCompile(`(?:^|\s)(-[a-z][a-z-]*)`).FindAllStringSubmatch(rest, -1)
			for _, name := range commands {
				if !regexp.MustCompile(`(?:^|[ ,(])` + regexp.QuoteMeta(name) + `(?:$|[ ,)])`).MatchString(names) {
					continue
				}
				names = strings.ReplaceAll(names, name, "") // "lead" is not "leader"
				help := helpOut(t, strings.Fields(name)...)
				for _, f := range flags {
					checked++
					if !strings.Contains(help, "\n  "+f[1]+" ") {
						t.Errorf("the exit status %q names %s for %s, which takes no such flag", strings.TrimSpace(clause), f[1], name)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no flag found in the exit statuses")
	}
}
