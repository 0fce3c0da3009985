package bus

import "time"

// workerIdle is how long a request goroutine waits for the next request
// before it ends.
const workerIdle = 5 * time.Second

// spawn runs f on an idle request goroutine, or on a new one. A goroutine
// kept between requests keeps the stack its requests grew: one started
// afresh for each request grew it from the smallest every time, and a
// token's signature made that an eleventh of the identity service's CPU
// (issue 39). There are never more of them than requests at once
// (MaxInFlight) and, for at most workerIdle, those that served them.
func (s *Service) spawn(f func()) {
	select {
	case s.tasks <- f:
	default:
		go s.work(f)
	}
}

// work runs f, then the requests handed to it, until it has idled for
// workerIdle or the service stops.
func (s *Service) work(f func()) {
	f()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case f := <-s.tasks:
			f()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-s.quit:
			return
		}
	}
}
