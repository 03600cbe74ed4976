package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/zkrecipes/zkrecipes/zktest"
)

// scrape fetches url and parses it with Prometheus' own text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if f := expfmt.ResponseFormat(resp.Header); f.FormatType() != expfmt.TypeTextPlain {
		t.Fatalf("GET %s: Content-Type %q, want the Prometheus text format", url, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: the Prometheus text parser refused it: %v", url, err)
	}
	return families
}

// sample finds the metric of family name whose labels include want.
func sample(families map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	for _, m := range families[name].GetMetric() {
		n := 0
		for _, l := range m.GetLabel() {
			if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
				n++
			}
		}
		if n == len(want) {
			return m
		}
	}
	return nil
}

var metricsURL = regexp.MustCompile(`zklock: serving metrics at (http://\S+/metrics)\n`)

// TestMetrics takes a lock with -metrics and reads the lock wait histogram
// from /metrics while CMD runs.
func TestMetrics(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	held := filepath.Join(t.TempDir(), "held")

	cmd := zklockCmd(t, addr, "-metrics", "127.0.0.1:0", "run", path, "--", "sh", "-c", `touch "$1"; exec sleep 30`, "sh", held)
	errFile := withStderrFile(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, held, cmd)
	m := metricsURL.FindStringSubmatch(readFile(t, errFile))
	if m == nil {
		t.Fatalf("stderr does not say where the metrics are served:\n%s", readFile(t, errFile))
	}
	families := scrape(t, m[1])

	// The OpenTelemetry names as the exporter translates them: the unit
	// "s" a suffix, annotations such as "{lease}" dropped, dots and the
	// attributes' dots made underscores.
	for name, want := range map[string]dto.MetricType{
		"zkrecipes_lock_wait_duration_seconds": dto.MetricType_HISTOGRAM,
		"zkrecipes_lock_wait_active":           dto.MetricType_GAUGE,
		"zkrecipes_lock_lease_active":          dto.MetricType_GAUGE,
		"zkrecipes_session_count":              dto.MetricType_GAUGE,
	} {
		if f := families[name]; f.GetType() != want {
			var names []string
			for n := range families {
				names = append(names, n)
			}
			t.Fatalf("%s: %v, want a %v; families: %v", name, f, want, names)
		}
	}
	const name = "zkrecipes_lock_wait_duration_seconds"
	s := sample(families, name, map[string]string{"zkrecipes_recipe": "mutex", "zkrecipes_outcome": "acquired"})
	if s == nil {
		t.Fatalf("%s has no sample with zkrecipes_recipe=mutex, zkrecipes_outcome=acquired: %v", name, families[name])
	}
	if n := s.GetHistogram().GetSampleCount(); n != 1 {
		t.Errorf("%s{zkrecipes_recipe=mutex,zkrecipes_outcome=acquired}: count %d, want 1", name, n)
	}
	version := ""
	for _, l := range s.GetLabel() {
		if strings.Contains(l.GetValue(), path) {
			t.Errorf("label %s=%q carries the lock path", l.GetName(), l.GetValue())
		}
		if l.GetName() == "otel_scope_version" {
			version = l.GetValue()
		}
	}
	if version == "" {
		t.Errorf("%s: no otel_scope_version: the instrumentation scope's version is not set", name)
	}
	// The lease run holds, and its session, connected.
	if s := sample(families, "zkrecipes_lock_lease_active", map[string]string{"zkrecipes_recipe": "mutex"}); s.GetGauge().GetValue() != 1 {
		t.Errorf("zkrecipes_lock_lease_active{zkrecipes_recipe=mutex}: %v, want 1", s)
	}
	if s := sample(families, "zkrecipes_session_count", map[string]string{"zkrecipes_session_state": "connected"}); s.GetGauge().GetValue() != 1 {
		t.Errorf("zkrecipes_session_count{zkrecipes_session_state=connected}: %v, want 1", s)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != 128+int(syscall.SIGTERM) {
		t.Errorf("exit status %d after SIGTERM, want %d; stderr:\n%s", got, 128+int(syscall.SIGTERM), readFile(t, errFile))
	}
}

// TestMetricsInProcess runs a command with -metrics in this process: the
// server and the provider must be gone when it returns.
func TestMetricsInProcess(t *testing.T) {
	addr := zktest.Start(t).Addr()
	defer goleak.VerifyNone(t)
	var out, errs bytes.Buffer
	// A path with nothing there: zklock connects, and says so (status 4).
	code := realMain([]string{"-zk", addr, "-metrics", "127.0.0.1:0", "holders", lockPath(t)}, &out, &errs)
	if code != exitNoPath || !metricsURL.MatchString(errs.String()) || !strings.Contains(errs.String(), "does not exist") {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", code, &out, &errs)
	}
	// And it serves no more.
	url := metricsURL.FindStringSubmatch(errs.String())[1]
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("GET %s after zklock returned: %s, want a refused connection", url, resp.Status)
	}
	client.CloseIdleConnections()
}

// TestHelp: -h lists every command and exit status, and exits 0.
func TestHelp(t *testing.T) {
	t.Parallel()
	cmd := zklockCmd(t, "127.0.0.1:1", "-h")
	if got := status(t, cmd); got != 0 {
		t.Fatalf("zklock -h: exit status %d", got)
	}
	help := stderr(cmd)
	for _, want := range []string{
		"run [", "holders PATH", "watch [-once] PATH", "lead [", "leader PATH",
		"queue put [", "queue take [", "queue ls PATH", "queue dead PATH", "queue requeue PATH ID...", "demo [",
		"-json", "-metrics ADDR",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	for _, code := range []int{exitOK, exitFailure, exitUsage, exitNoLeader, exitTimeout, exitLost, exitNoExec, exitNotFound} {
		if !regexp.MustCompile(fmt.Sprintf(`(?m)^  %d +\S`, code)).MatchString(help) {
			t.Errorf("help does not list exit status %d:\n%s", code, help)
		}
	}
	if !strings.Contains(help, "128+N") {
		t.Errorf("help does not list exit status 128+N")
	}
}
