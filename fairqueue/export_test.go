package fairqueue

// WithBucketSize lets the tests use small buckets.
var WithBucketSize = withBucketSize

// Name is a Queue's consumer name: its inbox's, its tickets', and the data
// of its node in the dispatcher's election.
func Name(q *Queue) string { return q.name }

// SpareLoop says whether the Queue's Takes follow their Acks at once, so
// that the next Ack of a Take's job puts a spare ticket in line.
func SpareLoop(q *Queue) bool { return q.spares.want() }
