package znode

// A Pool runs requests on goroutines that stay, idle, for the next ones,
// until either of its stop channels is closed: a new goroutine starts with
// a small stack that a request grows, by copying, every time; one that
// stays keeps what it grew (a queue's consumer reads each of its items
// from its own goroutine, so that the client pipelines them).
type Pool struct {
	work       chan func()
	stop, over <-chan struct{}
}

// NewPool returns a Pool whose idle goroutines leave once stop or over is
// closed.
func NewPool(stop, over <-chan struct{}) *Pool {
	return &Pool{work: make(chan func()), stop: stop, over: over}
}

// Go runs f on an idle goroutine of p, or on a new one.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		go p.run(f)
	}
}

func (p *Pool) run(f func()) {
	for {
		f()
		select {
		case f = <-p.work:
		case <-p.stop:
			return
		case <-p.over:
			return
		}
	}
}
