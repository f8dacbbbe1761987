package shard

import (
	"fmt"
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/tockhq/tock/job"
)

// ID numbers a shard, 0 to S-1.
type ID int

// MaxShards bounds the shard count: each shard gets a hash tag in its own slot range.
const MaxShards = 4096

// DefaultShards is the shard count of a new namespace.
const DefaultShards = 64

// Of maps a job id onto one of n shards: jump consistent hash of xxhash(jobID). Every
// shard gets close to 1/n of the ids, and growing n to n+1 moves only 1/(n+1) of them.
// An id with an '@' (a workflow's, or its nodes' jobs', job.NodeJobID) is mapped by
// what precedes its first '@', so that a workflow, its nodes and its scheduled
// definition share a shard; ordinary job ids have no '@'.
func Of(jobID string, n int) ID {
	for i := 0; i < len(jobID); i++ {
		if jobID[i] == job.NodeSep {
			jobID = jobID[:i]
			break
		}
	}
	return ID(jump(xxhash.Sum64String(jobID), n))
}

// jump is Lamping and Veach's jump consistent hash.
func jump(key uint64, n int) int32 {
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int32(b)
}

// Slot returns the Redis Cluster slot of a key (CRC16 of its hash tag, or of the key).
func Slot(key string) int {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// Tags returns the hash tags of n shards. Tag i is "s<i>" plus the shortest suffix that
// puts its slot inside [i·16384/n, (i+1)·16384/n), so the shards spread evenly over the
// slots and each Cluster master holds an even share of them.
func Tags(n int) ([]string, error) {
	if n < 1 || n > MaxShards {
		return nil, fmt.Errorf("shards: must be 1 to %d, got %d", MaxShards, n)
	}
	tags := make([]string, n)
	for i := range tags {
		lo, hi := i*16384/n, (i+1)*16384/n
		base := "s" + strconv.Itoa(i)
		for k := 0; ; k++ {
			t := base + "." + strconv.FormatInt(int64(k), 36)
			if s := int(crc16(t) % 16384); s >= lo && s < hi {
				tags[i] = t
				break
			}
		}
	}
	return tags, nil
}

// crc16 is CRC-16/XMODEM, the hash Redis Cluster uses for slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
