package redisconf

import (
	"strings"
	"testing"
)

// TestParseNeverShowsAPassword: a URL that does not parse fails with the
// syntax expected and none of its password, whole or in part, also when
// the password holds a separator that url.Parse or go-redis splits on.
func TestParseNeverShowsAPassword(t *testing.T) {
	for _, c := range []struct{ name, raw, secret string }{
		{Server, "redis://default:ab12/xyz@h:6379", "ab12"},
		{Server, "redis://default:1234/xyzsecret@h:6379", "xyzsecret"},
		{Server, "redis://:s3cret pass@localhost:6379/0", "s3cret"},
		{Sentinel, "redis://s:26379?master_name=m&password=Abc&Def123", "Def123"},
		{Sentinel, "redis://s:26379?master_name=m&password=Abc&Def123", "Abc"},
		{Sentinel, "redis://:hunter22@s1:26379?addr=s2:26379", "hunter22"},
		{Cluster, "redis://:hunter22@h1:6379?addr=h2:6379&nosuch=1", "hunter22"},
	} {
		_, err := Parse(c.name, c.raw)
		if err == nil {
			t.Errorf("%s=%s parsed", c.name, c.raw)
			continue
		}
		if strings.Contains(err.Error(), c.secret) {
			t.Errorf("%s=%s: the error shows %q: %v", c.name, c.raw, c.secret, err)
		}
		if !strings.Contains(err.Error(), "REDIS_SENTINEL_URL=redis://") {
			t.Errorf("%s=%s: the error does not show the syntax: %v", c.name, c.raw, err)
		}
	}
}

// TestFromEnv: one variable names the deployment; none is localhost:6379;
// two are refused.
func TestFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if c, err := FromEnv(env(nil)); err != nil || c.Var != "" || c.Where != "localhost:6379 db 0" {
		t.Errorf("none set: %+v %v", c, err)
	}
	c, err := FromEnv(env(map[string]string{Cluster: "redis://:pw1234@h1:7000?addr=h2:7001"}))
	if err != nil || c.Var != Cluster || c.Where != "cluster h1:7000,h2:7001" {
		t.Errorf("cluster: %+v %v", c, err)
	}
	c, err = FromEnv(env(map[string]string{Sentinel: "redis://s1:26379?addr=s2:26379&master_name=mymaster&password=pw1234"}))
	if err != nil || c.Var != Sentinel || !strings.Contains(c.Where, "sentinel master mymaster at s1:26379,s2:26379") || strings.Contains(c.Where, "pw1234") {
		t.Errorf("sentinel: %+v %v", c, err)
	}
	if _, err := FromEnv(env(map[string]string{Server: "redis://h:1/0", Cluster: "redis://h1:7000"})); err == nil || !strings.Contains(err.Error(), "REDIS_URL and REDIS_CLUSTER_URL are set") {
		t.Errorf("two set: %v", err)
	}
}
