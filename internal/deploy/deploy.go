// Package deploy names the Redis deployment a fairlock command talks to:
// a server given by URL, a Redis Cluster, or a primary watched by
// sentinels, chosen with the -redis, -cluster, -sentinel and -master
// flags. It is shared by the stress and fairlock commands, and is no
// part of the library.
package deploy

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Spec is a deployment. At most one of RedisURL, Cluster and Sentinel is
// set once Validate accepts it; Master is set with Sentinel. Its JSON form
// carries it to a stress worker process.
type Spec struct {
	RedisURL string   `json:"redis_url,omitempty"` // a single Redis
	Cluster  []string `json:"cluster,omitempty"`   // cluster seed addresses
	Sentinel []string `json:"sentinel,omitempty"`  // sentinel addresses
	Master   string   `json:"master,omitempty"`    // the name the sentinels know the primary by
}

// Flags defines on fs the flags that choose a deployment: -redis,
// -cluster, -sentinel and -master, into s. dflt says what no choice
// means, in the usage of -redis.
func (s *Spec) Flags(fs *flag.FlagSet, dflt string) {
	fs.StringVar(&s.RedisURL, "redis", "", "Redis `URL`, redis://host:port/db "+dflt+"; -redis, -cluster\nand -sentinel exclude each other")
	fs.Var(addrs{"-cluster", &s.Cluster}, "cluster", "Redis Cluster seed `addresses`, host:port,host:port")
	fs.Var(addrs{"-sentinel", &s.Sentinel}, "sentinel", "Redis Sentinel `addresses`, host:port,host:port: the primary they monitor\nas -master, through a failover client")
	fs.StringVar(&s.Master, "master", "", "with -sentinel: the `NAME` the sentinels monitor the primary under")
}

// Chosen names the flags that chose a deployment.
func (s *Spec) Chosen() []string {
	var fs []string
	if s.RedisURL != "" {
		fs = append(fs, "-redis")
	}
	if len(s.Cluster) > 0 {
		fs = append(fs, "-cluster")
	}
	if len(s.Sentinel) > 0 {
		fs = append(fs, "-sentinel")
	}
	return fs
}

// Validate checks the flags that chose a deployment: at most one, a
// sentinel list with a master name, a URL go-redis can parse.
func (s *Spec) Validate() error {
	switch fs := s.Chosen(); {
	case len(fs) > 1:
		return fmt.Errorf("%s and %s exclude each other: give one", strings.Join(fs[:len(fs)-1], ", "), fs[len(fs)-1])
	case len(s.Sentinel) > 0 && s.Master == "":
		return errors.New("-sentinel needs -master NAME, the name the sentinels monitor the primary under")
	case len(s.Sentinel) == 0 && s.Master != "":
		return errors.New("-master needs -sentinel, the addresses of the sentinels")
	}
	if s.RedisURL != "" {
		if _, err := redis.ParseURL(s.RedisURL); err != nil {
			return fmt.Errorf("-redis %q: %v", s.RedisURL, err)
		}
	}
	return nil
}

// Client returns a new go-redis client of the deployment, with its own
// connection pool: a cluster client, a failover client (which asks the
// sentinels where the primary is, and again when they announce a new
// one), or a plain client. dial, when positive, bounds each connection
// attempt (go-redis's DialTimeout); 0 keeps go-redis's default. Call it
// on a Spec that Validate accepted.
func (s Spec) Client(dial time.Duration) redis.UniversalClient {
	switch {
	case len(s.Cluster) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Cluster, DialTimeout: dial})
	case len(s.Sentinel) > 0:
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Master, SentinelAddrs: s.Sentinel, DialTimeout: dial})
	}
	opt, err := redis.ParseURL(s.RedisURL)
	if err != nil {
		opt = &redis.Options{Addr: s.RedisURL} // not reached after Validate
	}
	if dial > 0 {
		opt.DialTimeout = dial
	}
	return redis.NewClient(opt)
}

// String names the deployment for messages, without credentials.
func (s Spec) String() string {
	switch {
	case len(s.Cluster) > 0:
		return "cluster " + strings.Join(s.Cluster, ",")
	case len(s.Sentinel) > 0:
		return "sentinel master " + s.Master + " via " + strings.Join(s.Sentinel, ",")
	}
	if u, err := url.Parse(s.RedisURL); err == nil {
		return u.Redacted()
	}
	return "redis"
}

// addrs is the flag.Value of a host:port list: -cluster or -sentinel.
type addrs struct {
	name string
	list *[]string
}

var _ flag.Value = addrs{}

func (a addrs) String() string {
	if a.list == nil {
		return ""
	}
	return strings.Join(*a.list, ",")
}

// Set splits v at commas; empty items are skipped, and a list with no
// address or an item without a port is an error.
func (a addrs) Set(v string) error {
	var l []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("%s %q: %v", a.name, s, err)
		}
		l = append(l, s)
	}
	if len(l) == 0 {
		return fmt.Errorf("%s %q: no address", a.name, v)
	}
	*a.list = l
	return nil
}
