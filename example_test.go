package tock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/tockhq/tock"
	"github.com/tockhq/tock/dispatcher"
	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
	"github.com/tockhq/tock/worker"
)

// A job created with the Client fires on a worker built with the worker SDK.
func Example() {
	ctx := context.Background()
	mr := miniredis.NewMiniRedis() // any Redis server or Cluster works the same way
	_ = mr.Start()
	defer mr.Close()
	rc, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, AlwaysRESP2: true})
	defer rc.Close()

	client, err := tock.New(ctx, rc, shard.Config{Shards: 4})
	if err != nil {
		panic(err)
	}
	d, _ := dispatcher.New(dispatcher.Config{Store: client.Store()})
	_ = d.Start(ctx)
	defer d.Stop(ctx)

	done := make(chan struct{})
	w, _ := worker.New(worker.Config{Store: client.Store()})
	w.HandleFunc("greet", func(ctx context.Context, r *worker.Run) error {
		fmt.Printf("hello, %s (attempt %d)\n", r.Payload, r.Attempt)
		close(done)
		return nil
	})
	_ = w.Start(ctx)
	defer w.Stop(ctx)

	res, err := client.Create(ctx, &job.Job{ID: "greet-1", Type: "greet", Payload: []byte("world"),
		Schedule: job.Schedule{Delay: 50 * time.Millisecond}})
	if err != nil {
		panic(err)
	}
	fmt.Println("created", res.ID, res.State)
	<-done
	// Output:
	// created greet-1 scheduled
	// hello, world (attempt 1)
}
