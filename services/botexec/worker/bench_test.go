package worker

import (
	"context"
	"testing"
)

// BenchmarkRunEcho is one bot run through a worker, one at a time: the
// sandbox's own cost plus the two trips over the pipes (on this kind of
// machine about 0.25 ms to the worker and 0.13 ms back, mostly waking the
// other process).
func BenchmarkRunEcho(b *testing.B) {
	p, err := testPool()
	if err != nil {
		b.Fatal(err)
	}
	j := job(echo, "hello")
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		res, err := p.Run(ctx, j)
		if err != nil || res.Err != nil {
			b.Fatal(err, res.Err)
		}
	}
}

// BenchmarkRunEchoParallel is the pool's throughput with runs in flight
// on every worker.
func BenchmarkRunEchoParallel(b *testing.B) {
	p, err := testPool()
	if err != nil {
		b.Fatal(err)
	}
	j := job(echo, "hello")
	ctx := context.Background()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := p.Run(ctx, j)
			if err != nil || res.Err != nil {
				b.Fatal(err, res.Err)
			}
		}
	})
}
