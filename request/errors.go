package request

import (
	"errors"
	"fmt"
	"net/http"
	"unicode"

	"github.com/gpumem/gpumem"
)

// ErrUsage marks an error whose message is a usage problem (exit 2).
var ErrUsage = errors.New("usage")

// Error is a request's fault, or the service's state, as gpumem serve
// reports it: {"error": Msg, "field": Field} with the HTTP status Status
// (400: a bad field; 422: an input the library does not model, or a
// model larger than a request may name; 503: busy or past its deadline).
type Error struct {
	Status int
	Field  string // the request field at fault (JSON name); "" when none
	Msg    string
	Retry  bool // 503: the client may retry (Retry-After)
}

func (e *Error) Error() string { return e.Msg }

// BadField returns a 400 error naming a request field.
func BadField(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// LibraryError turns an error of the library or of the CLI's shared code
// into a reply: a *gpumem.FieldError names its field as the request
// calls it (RequestField), an input the library does not model is 422,
// anything else the input caused is 400.
func LibraryError(err error, fields map[string]string) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	status := http.StatusBadRequest
	if errors.Is(err, gpumem.ErrUnsupported) {
		status = http.StatusUnprocessableEntity
	}
	var fe *gpumem.FieldError
	if errors.As(err, &fe) {
		field := RequestField(fe.Field, fields)
		msg := (&gpumem.FieldError{Field: field, Value: fe.Value, Err: fe.Err}).Error()
		switch {
		case field == "" && fe.Field != "" && unicode.IsUpper(rune(fe.Field[0])):
			msg = fe.Err.Error() // a library name the request does not know
		case field == "":
			msg = err.Error() // "line 12 = 5Gb: ..."
		}
		return &Error{Status: status, Field: field, Msg: ForRequest(msg)}
	}
	return &Error{Status: status, Msg: ForRequest(err.Error())}
}
