package telemetry

import "context"

// Queue counters.

// Put counts n items put.
func (t *T) Put(n int) {
	if t != nil {
		t.itemPut.Add(context.Background(), int64(n))
	}
}

// Acked counts a job acked.
func (t *T) Acked() {
	if t != nil {
		t.jobAcked.Add(context.Background(), 1)
	}
}

// Nacked counts a job given back.
func (t *T) Nacked() {
	if t != nil {
		t.jobNacked.Add(context.Background(), 1)
	}
}

// Redelivered counts a job taken whose item had been delivered before.
func (t *T) Redelivered() {
	if t != nil {
		t.jobRedelivered.Add(context.Background(), 1)
	}
}

// Buried counts an item moved to the dead letters.
func (t *T) Buried() {
	if t != nil {
		t.itemDead.Add(context.Background(), 1)
	}
}
