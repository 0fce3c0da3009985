package fhirsvc

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pinion-health/pinion/pkg/bus"
	"github.com/pinion-health/pinion/pkg/terminology"
)

// expandValueSet answers GET ValueSet/$expand (url, filter, count, offset)
// from the value sets compiled from the official definitions; any signed-in
// caller may ask, as the base definitions are public in Medplum too.
func (s *Service) expandValueSet(_ context.Context, r *bus.Request) (*bus.Response, error) {
	e, err := terminology.Expand(r.Query, time.Now())
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, body), nil
}

// validateValueSetCode answers GET ValueSet/$validate-code (url, system,
// code, display) from the same table.
func (s *Service) validateValueSetCode(_ context.Context, r *bus.Request) (*bus.Response, error) {
	p, err := terminology.ValidateCode(r.Query)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return bus.FHIR(200, body), nil
}
