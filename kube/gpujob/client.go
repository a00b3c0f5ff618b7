package gpujob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Answer is gpumem serve's answer to an estimate request that names a
// GPU (gpu or memory): the fields of POST /v1/estimate's reply the
// components use, bytes as integers.
type Answer struct {
	AllocatedPeak int64            `json:"allocated_peak"`
	ReservedPeak  int64            `json:"reserved_peak"`
	DevicePeak    int64            `json:"device_peak"`
	RequiredPeak  int64            `json:"required_peak"` // a paged optimizer: what the fit is checked against
	Phase         string           `json:"phase"`
	Components    map[string]int64 `json:"components"`
	Device        string           `json:"device"`
	Free          int64            `json:"free"`
	MinHeadroom   int64            `json:"min_headroom"`
	Fits          bool             `json:"fits"`
	Shortfall     int64            `json:"shortfall"`
}

// Need is the memory one GPU must set aside for the job: the peak the
// service checks the fit against, plus its headroom.
func (a Answer) Need() int64 {
	return max(a.DevicePeak, a.RequiredPeak) + a.MinHeadroom
}

// Estimator answers estimate requests (the body of POST /v1/estimate)
// and plan requests (POST /v1/plan).
type Estimator interface {
	Estimate(ctx context.Context, body []byte) (Answer, error)
	// Advice is what gpumem plan would change for the job to fit: its
	// first fitting change, else its hints.
	Advice(ctx context.Context, body []byte) (string, error)
}

// RequestError is the service's 400: a field of the request at fault.
type RequestError struct {
	Field string `json:"field"`
	Msg   string `json:"error"`
}

func (e *RequestError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return fmt.Sprintf("field %q: %s", e.Field, e.Msg)
}

// Client is an Estimator over HTTP: gpumem serve at URL
// ("http://gpumem.gpumem-system:8080").
type Client struct {
	URL  string
	HTTP *http.Client // nil: http.DefaultClient
}

// Estimate posts body to /v1/estimate.
func (c *Client) Estimate(ctx context.Context, body []byte) (Answer, error) {
	var a Answer
	err := c.post(ctx, "/v1/estimate", body, &a)
	return a, err
}

// Advice posts body to /v1/plan and reads the change it applies, or its
// hints.
func (c *Client) Advice(ctx context.Context, body []byte) (string, error) {
	var p struct {
		Fits   bool     `json:"fits"`
		Hints  []string `json:"hints"`
		Ladder []struct {
			Change  string `json:"change"`
			Fits    bool   `json:"fits"`
			Applied bool   `json:"applied"`
		} `json:"ladder"`
	}
	if err := c.post(ctx, "/v1/plan", body, &p); err != nil {
		return "", err
	}
	return adviceOf(p.Fits, p.Hints, func(yield func(change string, fits, applied bool) bool) {
		for _, s := range p.Ladder {
			if !yield(s.Change, s.Fits, s.Applied) {
				return
			}
		}
	}), nil
}

// adviceOf words a plan: the changes it applied when they make the job
// fit, else its hints.
func adviceOf(fits bool, hints []string, ladder func(func(string, bool, bool) bool)) string {
	var applied []string
	ladder(func(change string, _, ok bool) bool {
		if ok && change != "as given" {
			applied = append(applied, change)
		}
		return true
	})
	switch {
	case fits && len(applied) > 0:
		return strings.Join(applied, ", ")
	case len(hints) > 0:
		return strings.Join(hints, "; ")
	case len(applied) > 0:
		return strings.Join(applied, ", ") + " (still short)"
	}
	return "no change found"
}

func (c *Client) post(ctx context.Context, path string, body []byte, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("gpumem service %q: %v", c.URL, err)
	}
	req.Header.Set("Content-Type", "application/json")
	h := c.HTTP
	if h == nil {
		h = http.DefaultClient
	}
	resp, err := h.Do(req)
	if err != nil {
		return fmt.Errorf("gpumem service: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("gpumem service %s: %w", path, err)
	}
	if resp.StatusCode == http.StatusBadRequest {
		re := &RequestError{}
		if json.Unmarshal(b, re) == nil && re.Msg != "" {
			return re
		}
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("gpumem service %s: %s: %s", path, resp.Status, truncate(string(bytes.TrimSpace(b)), 200))
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("gpumem service %s: reply is not the JSON expected: %v", path, err)
	}
	return nil
}

// IsRequestError reports whether err is the job's fault (a field of its
// request), not the service's.
func IsRequestError(err error) bool {
	var re *RequestError
	return errors.As(err, &re)
}
