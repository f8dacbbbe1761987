package snapshot

import (
	"context"
	"errors"
	"sync"
)

// each calls fn(ctx, i) for i from 0 to n-1, at most workers at once. The first error
// cancels the calls under way and stops the ones not begun. It returns ctx's error when
// ctx ended, else the error of the lowest i whose call failed other than by that
// cancellation.
func each(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range work {
				if errs[i] = fn(cctx, i); errs[i] != nil {
					cancel()
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case work <- i:
		case <-cctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	var cancelled error
	for _, err := range errs {
		switch {
		case err == nil:
		case errors.Is(err, context.Canceled):
			cancelled = err
		default:
			return err
		}
	}
	return cancelled
}
