package fairqueue

// WithBucketSize lets the tests use small buckets.
var WithBucketSize = withBucketSize
