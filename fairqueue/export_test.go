package fairqueue

// WithBucketSize lets the tests use small buckets.
var WithBucketSize = withBucketSize

// WithBacklogTTL sets how long the items of a look serve Takes.
var WithBacklogTTL = withBacklogTTL

// BacklogMin is how many free items a look must see to keep a backlog.
const BacklogMin = backlogMin
