package fairqueue

// WithBucketSize lets the tests use small buckets.
var WithBucketSize = withBucketSize

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
