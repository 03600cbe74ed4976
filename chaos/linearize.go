package chaos

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// regInput is one request to the fenced register.
type regInput struct {
	Write  bool
	Tok    int64
	Sec    uint32
	Expect int64 // for a write: the value its holder read
	Value  int64 // for a write: the value written
}

// regOutput is the register's answer.
type regOutput struct {
	Rej   bool
	Value int64 // for a read: the value read
}

// registerModel is a register written only by read-modify-writes: a write
// of v by a holder that read e is legal only when the register still holds
// e. The register itself does not check that (it only fences tokens); the
// model does. So a history is linearizable exactly when no accepted write
// ever overwrote a value its writer had not seen: no lost update, which is
// what a mutex is for. Refused requests change nothing.
var registerModel = porcupine.Model{
	Init: func() interface{} { return int64(0) },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		s, in, out := state.(int64), input.(regInput), output.(regOutput)
		switch {
		case out.Rej:
			return true, s
		case !in.Write:
			return out.Value == s, s
		default:
			return in.Expect == s, in.Value
		}
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(regInput), output.(regOutput)
		var s string
		if in.Write {
			s = fmt.Sprintf("write %d→%d", in.Expect, in.Value)
		} else {
			s = "read"
			if !out.Rej {
				s += fmt.Sprintf(" → %d", out.Value)
			}
		}
		if in.Tok == 0 {
			s += " (no token)"
		} else {
			s += fmt.Sprintf(" tok %d", in.Tok)
			if in.Sec > 0 {
				s += fmt.Sprintf(".%d", in.Sec)
			}
		}
		if out.Rej {
			s += " REFUSED"
		}
		return s
	},
	DescribeState: func(state interface{}) string { return fmt.Sprint(state.(int64)) },
}

// RegisterHistory turns the register events into porcupine operations.
// Invocation and response times are the clients' (the shared monotonic
// clock). A request with no response event, from a client killed or
// stopped before it could note the answer, takes its outcome from the
// register's log, and the time the register applied it as its response
// time; one the register never received did not happen and is left out.
func RegisterHistory(events []record.Event, log map[string]applied) (ops []porcupine.Operation, stats RegisterStats) {
	return RegisterHistoryOf(events, record.Mutex, log)
}

// RegisterHistoryOf is RegisterHistory of the register of workload w.
func RegisterHistoryOf(events []record.Event, w string, log map[string]applied) (ops []porcupine.Operation, stats RegisterStats) {
	type pending struct {
		op  porcupine.Operation
		ret bool
	}
	byOp := map[string]*pending{}
	var order []string
	for _, e := range Ordered(events) {
		if e.W != w {
			continue
		}
		switch e.K {
		case record.Call:
			in := regInput{Write: e.F == "w", Tok: e.Tok, Sec: e.Sec, Expect: e.X, Value: e.V}
			byOp[e.Op] = &pending{op: porcupine.Operation{ClientId: e.P, Input: in, Call: e.T}}
			order = append(order, e.Op)
		case record.Ret:
			if p := byOp[e.Op]; p != nil {
				p.op.Output, p.op.Return, p.ret = regOutput{Rej: e.Rej, Value: e.V}, e.T, true
			}
		}
	}
	for _, id := range order {
		p := byOp[id]
		a, applied := log[id]
		if !p.ret {
			if !applied {
				stats.NeverArrived++
				continue
			}
			stats.FromLog++
			p.op.Output, p.op.Return = regOutput{Rej: a.Rej, Value: a.V}, max(a.T, p.op.Call+1)
		} else if applied && (a.Rej != p.op.Output.(regOutput).Rej || a.V != p.op.Output.(regOutput).Value) {
			stats.Mismatch++
		}
		in := p.op.Input.(regInput)
		switch {
		case p.op.Output.(regOutput).Rej:
			stats.Refused++
		case in.Write:
			stats.Writes++
		default:
			stats.Reads++
		}
		ops = append(ops, p.op)
	}
	return ops, stats
}

// RegisterStats counts the register's operations.
type RegisterStats struct {
	Reads, Writes, Refused int
	FromLog                int // outcome taken from the register's log
	NeverArrived           int // left out
	Mismatch               int // client and log disagree (a bug of the harness)
}

// CheckRegister checks the history with porcupine and writes its HTML
// visualisation to htmlPath (when not empty).
func CheckRegister(ops []porcupine.Operation, htmlPath string, timeout time.Duration) (porcupine.CheckResult, []Violation, error) {
	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, timeout)
	var err error
	if htmlPath != "" {
		err = porcupine.VisualizePath(registerModel, info, htmlPath)
	}
	var vs []Violation
	switch res {
	case porcupine.Illegal:
		vs = append(vs, Violation{Rule: "register linearizable", Detail: fmt.Sprintf("porcupine: history of %d operations is not linearizable: an accepted write overwrote a value its writer had not read (lost update); see %s", len(ops), htmlPath), At: 0})
	case porcupine.Unknown:
		vs = append(vs, Violation{Rule: "register linearizable", Detail: fmt.Sprintf("porcupine: no verdict within %v", timeout), At: 0})
	}
	return res, vs, err
}
