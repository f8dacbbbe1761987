package snapshot

import (
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/tockhq/tock/job"
	"github.com/tockhq/tock/shard"
)

// record is one line of a shard file: one job, as JSON.
//
//	{"id":"invoice-42","exp":1767366245123,"f":{"st":"scheduled","nx":"1767366300000",...},"b":{"p":"AAEC/w=="}}
//
// f holds the fields of the job's hash whose values are valid UTF-8, b (base64) the
// others, so any payload bytes round-trip; exp, when present, is the job's expiry time in
// ms since the epoch.
type record struct {
	ID     string            `json:"id"`
	Expiry int64             `json:"exp,omitempty"`
	Fields map[string]string `json:"f"`
	Binary map[string][]byte `json:"b,omitempty"`
}

// newRecord returns the record of a job read from Redis.
func newRecord(j shard.JobRecord) record {
	r := record{ID: j.ID, Expiry: j.ExpireAt, Fields: make(map[string]string, len(j.Fields)/2)}
	for k := 0; k+1 < len(j.Fields); k += 2 {
		if v := j.Fields[k+1]; utf8.ValidString(v) {
			r.Fields[j.Fields[k]] = v
		} else {
			if r.Binary == nil {
				r.Binary = map[string][]byte{}
			}
			r.Binary[j.Fields[k]] = []byte(v)
		}
	}
	return r
}

// job checks r and returns the job it holds, its fields in name order.
func (r record) job() (shard.JobRecord, error) {
	if err := job.ValidateRef("id", r.ID, job.MaxIDLen); err != nil {
		return shard.JobRecord{}, err
	}
	if r.Expiry < 0 {
		return shard.JobRecord{}, fmt.Errorf("job %q: negative expiry time", r.ID)
	}
	if _, ok := r.Fields["st"]; !ok {
		return shard.JobRecord{}, fmt.Errorf("job %q: no state field", r.ID)
	}
	names := make([]string, 0, len(r.Fields)+len(r.Binary))
	for f := range r.Fields {
		names = append(names, f)
	}
	for f := range r.Binary {
		if _, ok := r.Fields[f]; ok {
			return shard.JobRecord{}, fmt.Errorf("job %q: field %q given twice", r.ID, f)
		}
		names = append(names, f)
	}
	sort.Strings(names)
	j := shard.JobRecord{ID: r.ID, ExpireAt: r.Expiry, Fields: make([]string, 0, 2*len(names))}
	for _, f := range names {
		v, ok := r.Fields[f]
		if !ok {
			v = string(r.Binary[f])
		}
		j.Fields = append(j.Fields, f, v)
	}
	return j, nil
}
