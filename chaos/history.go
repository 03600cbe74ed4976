package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// writeHistory writes h to dir: the events to events.jsonl, one a line,
// in the order they arrived; the rest to history.json.
func writeHistory(dir string, h *History) error {
	f, err := os.Create(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range h.Events {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(h, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
}

// LoadHistory reads back what a run wrote to dir (history.json and
// events.jsonl). Its Config.Out is dir.
func LoadHistory(dir string) (*History, error) {
	b, err := os.ReadFile(filepath.Join(dir, "history.json"))
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	h := &History{}
	if err := json.Unmarshal(b, h); err != nil {
		return nil, fmt.Errorf("chaos: history.json: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer f.Close()
	h.Events, err = readEvents(f)
	if err != nil {
		return nil, fmt.Errorf("chaos: events.jsonl: %w", err)
	}
	h.Config.Out = dir
	return h, nil
}

// readEvents reads events, one JSON object a line.
func readEvents(r io.Reader) ([]record.Event, error) {
	dec := json.NewDecoder(r)
	var out []record.Event
	for {
		var e record.Event
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, e)
	}
}
