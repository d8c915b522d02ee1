module github.com/fairlock/fairlock/bench/peers

go 1.26.8

replace github.com/fairlock/fairlock => ../..

require (
	github.com/bsm/redislock v0.9.4
	github.com/fairlock/fairlock v0.1.0
	github.com/go-redsync/redsync/v4 v4.18.1
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
