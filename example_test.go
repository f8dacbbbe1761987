package tock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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

// exampleClient returns a Client on a fresh in-memory Redis, and a function that
// closes both.
func exampleClient() (*tock.Client, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{mr.Addr()},
		DisableCache: true, ForceSingleClient: true, AlwaysRESP2: true})
	if err != nil {
		panic(err)
	}
	client, err := tock.New(context.Background(), rc, shard.Config{Shards: 4})
	if err != nil {
		panic(err)
	}
	return client, func() { rc.Close(); mr.Close() }
}

// Update changes parts of a job's definition; List pages through jobs.
func ExampleClient_Update() {
	ctx := context.Background()
	client, done := exampleClient()
	defer done()

	_, err := client.Create(ctx, &job.Job{ID: "report", Type: "report.daily",
		Schedule: job.Schedule{Cron: "0 9 * * *", TimeZone: "Europe/London"}})
	if err != nil {
		panic(err)
	}
	priority := 9
	info, err := client.Update(ctx, "report", shard.Update{
		Schedule: &job.Schedule{Cron: "30 7 * * MON-FRI", TimeZone: "Europe/London"},
		Priority: &priority,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(info.ID, info.Schedule.Cron, info.PriorityOrDefault(), info.State)

	// Every job of queue "default", a page at a time.
	for cursor := ""; ; {
		page, err := client.List(ctx, shard.ListFilter{Queue: "default", Cursor: cursor})
		if err != nil {
			panic(err)
		}
		for _, j := range page.Jobs {
			fmt.Println("listed", j.ID, j.Type)
		}
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	// Output:
	// report 30 7 * * MON-FRI 9 scheduled
	// listed report report.daily
}

// Queues reports every queue's figures; PauseQueue stops workers from claiming from a
// queue until ResumeQueue.
func ExampleClient_PauseQueue() {
	ctx := context.Background()
	client, done := exampleClient()
	defer done()

	for _, id := range []string{"m1", "m2"} {
		if _, err := client.Create(ctx, &job.Job{ID: id, Queue: "mail", Type: "email",
			Schedule: job.Schedule{Delay: time.Hour}}); err != nil {
			panic(err)
		}
	}
	changed, err := client.PauseQueue(ctx, "mail")
	if err != nil {
		panic(err)
	}
	fmt.Println("paused:", changed)
	queues, err := client.Queues(ctx)
	if err != nil {
		panic(err)
	}
	for _, q := range queues {
		fmt.Printf("%s paused=%v scheduled=%d ready=%d in_flight=%d dead=%d\n",
			q.Queue, q.Paused, q.Scheduled, q.Ready, q.InFlight, q.Dead)
	}
	changed, err = client.ResumeQueue(ctx, "mail")
	if err != nil {
		panic(err)
	}
	fmt.Println("resumed:", changed)
	// Output:
	// paused: true
	// mail paused=true scheduled=2 ready=0 in_flight=0 dead=0
	// resumed: true
}

// Dead lists the runs that failed their last attempt; RequeueDead gives one a fresh set
// of attempts, DeleteDead drops one.
func ExampleClient_Dead() {
	ctx := context.Background()
	client, done := exampleClient()
	defer done()
	d, _ := dispatcher.New(dispatcher.Config{Store: client.Store()})
	_ = d.Start(ctx)
	defer d.Stop(ctx)
	w, _ := worker.New(worker.Config{Store: client.Store()})
	var attempts atomic.Int32
	ran := make(chan error, 2)
	w.HandleFunc("charge", func(ctx context.Context, r *worker.Run) error {
		if attempts.Add(1) == 1 {
			ran <- errors.New("card declined")
			return errors.New("card declined")
		}
		ran <- nil
		return nil
	})
	_ = w.Start(ctx)
	defer w.Stop(ctx)

	_, err := client.Create(ctx, &job.Job{ID: "charge-7", Type: "charge",
		Schedule: job.Schedule{Now: true}, Retry: job.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		panic(err)
	}
	fmt.Println("attempt 1:", <-ran)
	var dead []shard.DeadRun
	for len(dead) == 0 { // the worker reports the outcome a moment after the handler returns
		if dead, _, err = client.Dead(ctx, "", 0, ""); err != nil {
			panic(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("dead:", dead[0].JobID, dead[0].Attempts, dead[0].Error)
	if err := client.RequeueDead(ctx, dead[0].Member); err != nil {
		panic(err)
	}
	fmt.Println("attempt 2:", <-ran)
	// Requeued, the run left the dead-letter set: there is nothing to delete.
	err = client.DeleteDead(ctx, dead[0].Member)
	fmt.Println("no longer dead:", errors.Is(err, tock.ErrNotFound))
	// Output:
	// attempt 1: card declined
	// dead: charge-7 1 card declined
	// attempt 2: <nil>
	// no longer dead: true
}
