package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseInfoReadsTheProcessItsRoleAndItsCounters(t *testing.T) {
	at := sec(1)
	tests := []struct {
		name string
		info string
		want reading
	}{
		{
			name: "a replica of Redis 7 (INFO all)",
			info: "# Server\r\nredis_version:7.0.15\r\nrun_id:4b6c0f\r\nuptime_in_seconds:42\r\n\r\n" +
				"# Stats\r\ntotal_commands_processed:9\r\n\r\n# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\n\r\n" +
				"# Commandstats\r\ncmdstat_evalsha:calls=6,usec=60,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
				"cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n\r\n" +
				"# Latencystats\r\nlatency_percentiles_usec_evalsha:p50=10.000,p99=20.000\r\n",
			want: reading{Addr: "n", At: at, RunID: "4b6c0f", Primary: false, Uptime: 42 * time.Second, Detailed: true,
				Total: 8, Calls: map[string]int64{"evalsha": 6, "client|setinfo": 2}},
		},
		{
			name: "a fresh primary: the section is there, still empty",
			info: "# Server\r\nrun_id:9e1\r\nuptime_in_seconds:0\r\n# Replication\r\nrole:master\r\n# Commandstats\r\n",
			want: reading{Addr: "n", At: at, RunID: "9e1", Primary: true, Detailed: true, Calls: map[string]int64{}},
		},
		{
			name: "the embedded server (plain INFO)",
			info: "# Clients\r\nconnected_clients:3\r\n\r\n# Stats\r\ntotal_connections_received:4\r\ntotal_commands_processed:1234\r\n",
			want: reading{Addr: "n", At: at, Primary: true, Uptime: -1, Total: 1234},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, parseInfo("n", at, tt.info))
		})
	}
}
