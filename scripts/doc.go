// Package scripts holds no Go code: it is the home of the shell scripts of this
// directory and of their tests (scripts_test.go runs redis-cluster.sh against the
// real redis-server and redis-cli, and redis-cost.sh under valgrind).
package scripts
