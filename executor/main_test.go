package executor_test

import (
	"testing"

	"github.com/tockhq/tock/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
