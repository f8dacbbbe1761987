package main

import "context"

// runSnapshot runs tock snapshot export|restore.
func runSnapshot(ctx context.Context, args []string, c *cli) error {
	return &usageError{"tock snapshot: not built yet"}
}
