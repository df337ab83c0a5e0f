package ratelimit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 (its own CA)
// and its key to dir, and returns their paths.
func selfSigned(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"redis.test"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TLS to Redis: the server's certificate is checked against ca_file; a
// certificate from another CA is refused (on_error closed: 503) unless
// insecure_skip_verify.
func TestRedisTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir, "server")
	other, _ := selfSigned(t, dir, "other")
	srv, tlsAddr := redistest.StartTLS(t, cert, key)
	tlsConfig := func(tls string) string {
		return fmt.Sprintf(`"on_error":"closed","redis":{"addresses":[%q],"tls":%s},`, tlsAddr, tls)
	}
	for _, c := range []struct {
		name, tls string
		code      int
	}{
		{"ca_file", fmt.Sprintf(`{"ca_file":%q}`, cert), 200},
		{"server_name", fmt.Sprintf(`{"ca_file":%q,"server_name":"redis.test"}`, cert), 200},
		{"other CA", fmt.Sprintf(`{"ca_file":%q}`, other), 503},
		{"insecure_skip_verify", fmt.Sprintf(`{"ca_file":%q,"insecure_skip_verify":true}`, other), 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			// (The "redis" object of tlsConfig merges with
			// redisConfig's, which has the same address.)
			h := provision(t, redisConfig(tlsAddr, 5, tlsConfig(c.tls)), nil)
			if res := serve(h, newReq("192.0.2.9:1")); res.code != c.code {
				t.Fatalf("code %d, want %d", res.code, c.code)
			}
		})
	}
	// The admitted decisions were counted in this Redis.
	if keys := redisKeys(t, srv.Addr, "rl:api:*"); keys == "" {
		t.Fatal("no key written over TLS")
	}
}

// Authentication: password (and ACL user), from an environment
// placeholder; a wrong password is a Redis failure, never a 500.
func TestRedisAuth(t *testing.T) {
	srv := redistest.StartArgs(t, "--requirepass", "s3cret")
	t.Setenv("RL_TEST_REDIS_PASSWORD", "s3cret")
	h := provision(t, redisConfig(srv.Addr, 5, `"on_error":"closed","redis":{"addresses":["`+srv.Addr+`"],"password":"{env.RL_TEST_REDIS_PASSWORD}"},`), nil)
	if res := serve(h, newReq("192.0.2.9:1")); res.code != 200 {
		t.Fatalf("right password: %d", res.code)
	}
	bad := provision(t, redisConfig(srv.Addr, 5, `"on_error":"closed","redis":{"addresses":["`+srv.Addr+`"],"password":"wrong"},`), nil)
	if res := serve(bad, newReq("192.0.2.9:1")); res.code != 503 || res.err != nil {
		t.Fatalf("wrong password: code %d err %v, want 503", res.code, res.err)
	}
}
