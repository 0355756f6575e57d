package redisconn

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

const sentinelScheme = "redis+sentinel"

// parseSentinelURL reads the redis+sentinel:// form NewClient documents. It never
// echoes the URL in an error: it may carry a password.
func parseSentinelURL(rawURL string) (*redis.FailoverOptions, error) {
	// net/url cannot parse a host list ("h1:1,h2:2" has a port "2,h2:2"): take the
	// hosts out, and let it parse the rest.
	rest := strings.TrimPrefix(rawURL, sentinelScheme+"://")
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	hosts := authority
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, hosts = authority[:at+1], authority[at+1:]
	}
	u, err := url.Parse(sentinelScheme + "://" + userinfo + "sentinels" + rest[end:])
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	fo := &redis.FailoverOptions{}
	if u.User != nil {
		fo.Username = u.User.Username()
		fo.Password, _ = u.User.Password()
	}
	for _, hp := range strings.Split(hosts, ",") {
		if hp == "" {
			return nil, errors.New("empty sentinel address")
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil { // no port: "h", or an IPv6 literal "[::1]"
			host, port = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), "26379"
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("sentinel address %q: want host:port", hp)
		}
		fo.SentinelAddrs = append(fo.SentinelAddrs, net.JoinHostPort(host, port))
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if path[0] == "" || len(path) > 2 {
		return nil, errors.New("want /mastername or /mastername/db after the sentinel addresses")
	}
	fo.MasterName = path[0]
	if len(path) == 2 {
		if fo.DB, err = strconv.Atoi(path[1]); err != nil || fo.DB < 0 {
			return nil, fmt.Errorf("invalid database number %q", path[1])
		}
	}
	for k, v := range u.Query() {
		switch k {
		case "sentinel_username":
			fo.SentinelUsername = v[len(v)-1]
		case "sentinel_password":
			fo.SentinelPassword = v[len(v)-1]
		default:
			return nil, fmt.Errorf("unknown option %q (known: sentinel_username, sentinel_password)", k)
		}
	}
	return fo, nil
}

const (
	clusterScheme    = "redis+cluster"
	clusterTLSScheme = "rediss+cluster"
)

// isClusterURL reports whether rawURL names a Redis Cluster.
func isClusterURL(rawURL string) bool {
	return strings.HasPrefix(rawURL, clusterScheme+"://") || strings.HasPrefix(rawURL, clusterTLSScheme+"://")
}

// parseClusterURL reads
//
//	redis+cluster://[[user]:password@]host1:port1[,host2:port2...][/0]
//	rediss+cluster://... (TLS; each node's certificate is checked against the
//	host of its address)
//
// The hosts are seeds: the client learns the other nodes from them. A port
// left out is 6379. It never echoes the URL in an error: it may carry a
// password.
func parseClusterURL(rawURL string) (*redis.ClusterOptions, error) {
	scheme := clusterScheme
	if strings.HasPrefix(rawURL, clusterTLSScheme+"://") {
		scheme = clusterTLSScheme
	}
	rest := strings.TrimPrefix(rawURL, scheme+"://")
	// The userinfo ends at the last '@' (a password may hold '@', '/', '?'
	// or '#' unencoded); the seeds, database and options follow it.
	o := &redis.ClusterOptions{}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		user, pass, _ := strings.Cut(rest[:at], ":")
		var err1, err2 error
		o.Username, err1 = url.PathUnescape(user)
		o.Password, err2 = url.PathUnescape(pass)
		if err1 != nil || err2 != nil {
			return nil, errors.New("the user name or password is not validly %-encoded")
		}
		rest = rest[at+1:]
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	hosts := rest[:end]
	u, err := url.Parse("redis://seeds" + rest[end:])
	if err != nil {
		return nil, errors.New("not a valid URL")
	}
	for _, hp := range strings.Split(hosts, ",") {
		if hp == "" {
			return nil, errors.New("empty cluster node address")
		}
		host, port, err := net.SplitHostPort(hp)
		if err != nil { // no port: "h", or an IPv6 literal "[::1]"
			host, port = strings.TrimSuffix(strings.TrimPrefix(hp, "["), "]"), "6379"
		}
		if host == "" || port == "" {
			return nil, fmt.Errorf("cluster node address %q: want host:port", hp)
		}
		o.Addrs = append(o.Addrs, net.JoinHostPort(host, port))
	}
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return nil, fmt.Errorf("a cluster has only database 0, not %q", p)
	}
	if len(u.Query()) > 0 || u.Fragment != "" {
		return nil, errors.New("a cluster URL takes no options")
	}
	if scheme == clusterTLSScheme {
		// No ServerName: each node's is the host it is dialled at.
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return o, nil
}

// urlError is the error of a URL that did not parse, without its text when
// the URL has a user name or password: parsers quote the parts they refuse,
// and a password with an unencoded '/', '%' or '?' lands in such a part.
func urlError(rawURL string, err error) error {
	if strings.Contains(rawURL, "@") {
		return errors.New("parse redis url: not a valid URL (the user name and password must be %-encoded)")
	}
	return fmt.Errorf("parse redis url: %w", err)
}
