package chaos

import (
	"fmt"

	"github.com/zkrecipes/zkrecipes/chaos/record"
)

// QueueStats counts what happened to the queue.
type QueueStats struct {
	Puts, PutOK, PutUnknown, PutFailed int
	Takes, Redeliveries                int
	Acks, AckLost, AckUnknown          int
}

// CheckQueue checks the queue workload:
//
//   - every item whose Put succeeded was acked (or its Ack's outcome is
//     unknown and, the queue being empty at the end, it is gone);
//   - no item was acked twice;
//   - nothing was delivered that no one put;
//   - each consumer session is given first deliveries in increasing id
//     order: ids go backwards only for a redelivery (Attempt > 1);
//   - an id always carries the same payload.
//
// remaining is the number of items left in the queue once drained (pending
// plus dead letters); it must be zero.
//
// An item whose only Acks failed is not lost if the queue is empty at the
// end: an Ack cut off mid-flight may have landed. If such an Ack said the
// claim was lost (ErrClaimLost: "the item will be delivered again") and the
// item was never delivered again, the Ack did land and said otherwise: that
// is returned as a finding, not a violation.
func CheckQueue(events []record.Event, remaining int) (QueueStats, []Violation, []Violation) {
	var st QueueStats
	var vs []Violation
	type key struct {
		p, inc int
		sid    int64
	}
	attempted := map[string]bool{}
	putOK := map[string]string{} // payload -> id
	var putOrder []string
	acked := map[string]int{}
	ackUnknown := map[string]bool{}
	ackLost := map[string]int{} // payload -> takes seen when an Ack said claim lost
	takes := map[string]int{}   // payload -> deliveries
	idOf := map[string]string{}
	payloadOf := map[string]string{}
	lastFirst := map[key]string{}
	for _, e := range Ordered(events) {
		if e.W != record.Queue {
			continue
		}
		switch e.K {
		case record.Put:
			st.Puts++
			attempted[e.D] = true
		case record.PutOK:
			st.PutOK++
			putOK[e.D] = e.ID
			putOrder = append(putOrder, e.D)
		case record.PutErr:
			if e.Unknown {
				st.PutUnknown++
			} else {
				st.PutFailed++
			}
		case record.Take:
			st.Takes++
			takes[e.D]++
			idOf[e.D] = e.ID
			if !attempted[e.D] {
				vs = append(vs, Violation{"no phantom items", fmt.Sprintf("item %s delivered with payload %q that no one put", e.ID, e.D), e.T})
			}
			if p, ok := payloadOf[e.ID]; ok && p != e.D {
				vs = append(vs, Violation{"an id keeps its payload", fmt.Sprintf("item %s delivered with %q and with %q", e.ID, p, e.D), e.T})
			}
			payloadOf[e.ID] = e.D
			if e.N > 1 {
				st.Redeliveries++
				continue
			}
			k := key{e.P, e.Inc, e.Sid}
			if prev, ok := lastFirst[k]; ok && e.ID <= prev {
				vs = append(vs, Violation{"ids go backwards only on redelivery", fmt.Sprintf("client %d.%d (session 0x%x) took item %s (attempt 1) after item %s", e.P, e.Inc, e.Sid, e.ID, prev), e.T})
			}
			lastFirst[k] = e.ID
		case record.Ack:
			st.Acks++
			acked[e.D]++
			if acked[e.D] == 2 {
				vs = append(vs, Violation{"no item acked twice", fmt.Sprintf("item %s (%q) acked twice", e.ID, e.D), e.T})
			}
		case record.AckErr:
			if e.Unknown {
				st.AckUnknown++
				ackUnknown[e.D] = true
			} else {
				st.AckLost++
				ackLost[e.D] = takes[e.D]
			}
		}
	}
	var findings []Violation
	missing := 0
	for _, d := range putOrder {
		if n, ok := ackLost[d]; ok && acked[d] == 0 && remaining == 0 && takes[d] == n {
			findings = append(findings, Violation{"queue: ack misreported", fmt.Sprintf("item %s (%q): its Ack returned ErrClaimLost, yet it was never delivered again and the queue is empty: the Ack landed", idOf[d], d), 0})
			continue
		}
		if acked[d] == 0 && !(ackUnknown[d] && remaining == 0) {
			missing++
			if missing <= 5 {
				vs = append(vs, Violation{"every put item acked", fmt.Sprintf("item %s (%q) was put but never acked", putOK[d], d), 0})
			}
		}
	}
	if missing > 5 {
		vs = append(vs, Violation{"every put item acked", fmt.Sprintf("... and %d more", missing-5), 0})
	}
	if remaining != 0 {
		vs = append(vs, Violation{"queue drained", fmt.Sprintf("%d items left in the queue after draining", remaining), 0})
	}
	return st, vs, findings
}
