package fairqueue

// WithBucketSize lets the tests use small buckets.
var WithBucketSize = withBucketSize

// WithHandOutHook has the dispatcher call f once each hand-out multi is
// answered, before it takes the answer in.
var WithHandOutHook = withHandOutHook

// WithAckLinger sets how long a Work's ack waits for its lot.
var WithAckLinger = withAckLinger

// TicketOf is the path of the ticket j's delivery stands on.
func TicketOf(j *Job) string { return j.ticket }

// InboxOffers reads an inbox's data: the ticket and the item id of each
// offer in it.
func InboxOffers(data []byte) (tickets, ids []string) {
	for _, o := range parseInbox(data) {
		if o.name != "" {
			tickets, ids = append(tickets, o.ticket), append(ids, o.id())
		}
	}
	return tickets, ids
}

// Name is a Queue's consumer name: its inbox's, its tickets', and the data
// of its node in the dispatcher's election.
func Name(q *Queue) string { return q.name }

// SpareLoop says whether the Queue's Takes follow their Acks at once, so
// that the next Ack of a Take's job puts a spare ticket in line.
func SpareLoop(q *Queue) bool { return q.spares.want() }

// ItemData is the payload of the item node name of bucket dir b under
// items (its node's data, its part of its blob's, read with get, or what
// its name holds).
func ItemData(items, b, name string, get func(string) ([]byte, error)) ([]byte, error) {
	if data, ok := inlinePayload(name); ok {
		return data, nil
	}
	blob, idx, ok := parseBlobRef(name)
	if !ok {
		return get(items + "/" + b + "/" + name)
	}
	data, err := get(items + "/" + blobDirPrefix + b[len(bucketPrefix):] + "/" + blob)
	if err != nil {
		return nil, err
	}
	part, _ := blobPart(data, idx)
	return part, nil
}

// InlineMax is the largest payload an item's name holds.
const InlineMax = inlineMax
