package ingest

import (
	"context"
	"net/http"
	"time"
)

// The run endpoints, for workers that claim over HTTP (docs/executors.md). They need a
// worker or write token.

// ClaimRuns claims up to req.Max runs that start now (POST /v1/runs:claim), waiting up
// to req.Wait for one when none is ready; the reply holds none when none came. ctx
// should allow for the wait.
func (c *Client) ClaimRuns(ctx context.Context, req ClaimRequest) (ClaimReply, error) {
	var r ClaimReply
	_, err := c.do(ctx, http.MethodPost, "/v1/runs:claim", nil, nil, req, &r)
	return r, err
}

// HeartbeatRuns pushes the visibility deadlines of held runs (POST /v1/runs:heartbeat);
// the reply says, per run and in order, whether it was extended, cancelled meanwhile
// (stop it and report CancelRun) or lost (stop it: another worker may have it).
func (c *Client) HeartbeatRuns(ctx context.Context, worker string, runs []HeldRun) (HeartbeatReply, error) {
	var r HeartbeatReply
	_, err := c.do(ctx, http.MethodPost, "/v1/runs:heartbeat", nil, nil, HeartbeatRequest{Runs: runs, Worker: worker}, &r)
	return r, err
}

// AckRun reports that a run succeeded (POST /v1/runs/{run}:ack), with result stored
// with it when not empty (sent as result when it is compact JSON, else as result_base64). A run not held with token any more
// gives an *APIError with status 409 and code CodeTokenMismatch.
func (c *Client) AckRun(ctx context.Context, run, token string, result []byte) (RunReply, error) {
	req := AckRequest{Token: token}
	req.Result, req.ResultBase64 = encodePayload(result) // an empty result is none
	return c.runAction(ctx, run, ":ack", req)
}

// FailRun reports that a run failed with errMsg (POST /v1/runs/{run}:fail): it is
// retried by the job's policy, after retryAfter instead of the backoff when above 0, or
// dead after its last attempt.
func (c *Client) FailRun(ctx context.Context, run, token, errMsg string, retryAfter time.Duration) (RunReply, error) {
	req := FailRequest{Token: token, Error: errMsg}
	if retryAfter > 0 {
		req.RetryAfter = retryAfter.String()
	}
	return c.runAction(ctx, run, ":fail", req)
}

// SnoozeRun asks for a run to be tried again after delay without using an attempt
// (POST /v1/runs/{run}:snooze).
func (c *Client) SnoozeRun(ctx context.Context, run, token string, delay time.Duration) (RunReply, error) {
	return c.runAction(ctx, run, ":snooze", SnoozeRequest{Token: token, Delay: delay.String()})
}

// CancelRun ends a run cancelled, not to be retried (POST /v1/runs/{run}:cancel).
func (c *Client) CancelRun(ctx context.Context, run, token, errMsg string) (RunReply, error) {
	return c.runAction(ctx, run, ":cancel", CancelRunRequest{Token: token, Error: errMsg})
}

// AckRuns reports the successes of several runs in one call (POST /v1/runs:ack, at most
// MaxReportRuns): one Redis script call per shard instead of one per run. The reply
// says, per run and in order, whether it was recorded (Status 200) or refused: 409
// CodeTokenMismatch for a run not held with its token any more, 404, or 400/413 for
// the run's own fields. The error is for the call as a whole.
func (c *Client) AckRuns(ctx context.Context, runs []RunAck) (RunsReply, error) {
	var r RunsReply
	_, err := c.do(ctx, http.MethodPost, "/v1/runs:ack", nil, nil, AckRunsRequest{Runs: runs}, &r)
	return r, err
}

// FailRuns reports the failures of several runs in one call (POST /v1/runs:fail), as
// AckRuns.
func (c *Client) FailRuns(ctx context.Context, runs []RunFail) (RunsReply, error) {
	var r RunsReply
	_, err := c.do(ctx, http.MethodPost, "/v1/runs:fail", nil, nil, FailRunsRequest{Runs: runs}, &r)
	return r, err
}

func (c *Client) runAction(ctx context.Context, run, verb string, in any) (RunReply, error) {
	var r RunReply
	err := c.doRes(ctx, http.MethodPost, "/v1/runs/", run, verb, in, &r)
	return r, err
}
