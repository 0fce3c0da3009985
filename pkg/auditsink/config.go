package auditsink

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/pinion-health/pinion/pkg/config"
)

// FromConfig makes the destinations the settings name, none when no sink
// is set. A TLS file that cannot be read or used is an error naming its
// setting, at start.
func FromConfig(c *config.Config) ([]Destination, error) {
	var dests []Destination
	if c.AuditSyslogAddr != "" {
		cfg, err := tlsConfig("PINION_AUDIT_SYSLOG_CA", c.AuditSyslogCA)
		if err != nil {
			return nil, err
		}
		if c.AuditSyslogCert != "" {
			cert, err := tls.LoadX509KeyPair(c.AuditSyslogCert, c.AuditSyslogKey)
			if err != nil {
				return nil, fmt.Errorf("PINION_AUDIT_SYSLOG_CERT and PINION_AUDIT_SYSLOG_KEY: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		d, err := NewSyslog(SyslogConfig{Addr: c.AuditSyslogAddr, TLS: cfg})
		if err != nil {
			return nil, fmt.Errorf("PINION_AUDIT_SYSLOG_ADDR: %w", err)
		}
		dests = append(dests, d)
	}
	if c.AuditWebhookURL != "" {
		cfg, err := tlsConfig("PINION_AUDIT_WEBHOOK_CA", c.AuditWebhookCA)
		if err != nil {
			return nil, err
		}
		d, err := NewWebhook(WebhookConfig{URL: c.AuditWebhookURL, Secret: c.AuditWebhookSecret, TLS: cfg})
		if err != nil {
			return nil, fmt.Errorf("PINION_AUDIT_WEBHOOK_URL: %w", err)
		}
		dests = append(dests, d)
	}
	return dests, nil
}

// tlsConfig trusts the CAs of the PEM file named by setting, or the
// system's when it is empty.
func tlsConfig(setting, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", setting, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", setting, caFile)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
