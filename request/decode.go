package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
)

// DecodeStrict decodes one JSON object from body into v, refusing unknown
// fields and trailing data; errors name the field.
func DecodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &Error{Status: http.StatusBadRequest, Msg: "invalid JSON: data after the top-level object"}
	}
	return nil
}

// unknownField matches encoding/json's error for DisallowUnknownFields.
var unknownField = regexp.MustCompile(`^json: unknown field "(.*)"$`)

// jsonError turns a decoding error into a reply naming the field.
func jsonError(err error) *Error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return &Error{Status: http.StatusBadRequest, Msg: "empty request body: want a JSON object"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &Error{Status: http.StatusBadRequest, Msg: "invalid JSON: unexpected end of the body"}
	case errors.As(err, &se):
		return &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)}
	case errors.As(err, &te):
		if te.Field == "" {
			return &Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("want a JSON object, got %s", te.Value)}
		}
		// A field of the embedded Estimate (in a plan request) is
		// named with the Go type's: the client knows only the field.
		field := strings.TrimPrefix(te.Field, "Estimate.")
		return BadField(field, "%s: want %s, got %s", field, jsonKind(te.Type.String()), te.Value)
	}
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		return BadField(m[1], "unknown field %q", m[1])
	}
	return &Error{Status: http.StatusBadRequest, Msg: "invalid JSON: " + err.Error()}
}

// jsonKind names a Go type as a JSON client knows it.
func jsonKind(goType string) string {
	switch goType {
	case "int", "int64":
		return "an integer"
	case "bool":
		return "true or false"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "json.RawMessage":
		return "a JSON value"
	}
	return goType
}

// SizeText reads a size given as a string ParseBytes reads ("80GiB") or
// as a JSON integer number of bytes, and returns it as text; "" when the
// value is absent or null.
func SizeText(field string, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", nil
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", BadField(field, "%s: %v", field, err)
		}
		return s, nil
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return "", BadField(field, "%s: want a size such as \"80GiB\" or an integer of bytes, got %s", field, raw)
		}
	}
	// A JSON integer is a number of bytes: say so, since a size string
	// without a unit is refused (CheckTarget).
	return string(raw) + "B", nil
}

// CheckTarget checks a memory size a request gives as a string as the
// command line's size flags are read (ParseSize): a positive amount with
// a unit, or an integer of bytes from 1 MiB up. "80" is refused with the
// units it may have meant, not read as 80 bytes; "0" and "0GiB" are
// refused, not read as "no GPU named".
func CheckTarget(field, text string) error {
	if _, err := ParseSize(field, text, "80GiB"); err != nil {
		return BadField(field, "%s", ForRequest(err.Error()))
	}
	return nil
}

// truncate shortens b for an error message.
func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
