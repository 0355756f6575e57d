package handlers

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// maxBody is the largest request body accepted (413 above it).
const maxBody = 16 << 10

// decodeJSON reads an optional JSON object into dst: an empty body leaves dst as
// it is (all defaults). It rejects a body over 16 KiB (*http.MaxBytesError), one
// that does not arrive in time (errBodyTimeout), a body (even blank) without a
// JSON Content-Type (errUnsupportedMedia), and a body cut short, malformed
// JSON, unknown fields, wrong types and trailing data (*validationError).
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge) || errors.Is(err, errBodyTimeout):
		return err
	case err != nil: // cut short by the client (shorter than its Content-Length) or malformed chunks
		return &validationError{detail: "The body could not be read: it ended before its announced length, or its chunked encoding is malformed."}
	}
	if info, _ := r.Context().Value(reqInfoKey{}).(*reqInfo); info != nil {
		sum := sha256.Sum256(bytes.TrimSpace(data)) // what an Idempotency-Key's retry must send again
		info.bodySum = hex.EncodeToString(sum[:])
		info.bodyRead = true
	}
	if len(data) == 0 {
		return nil
	}
	if !jsonMediaType(r.Header.Get("Content-Type")) {
		return errUnsupportedMedia
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &validationError{detail: "The body must hold one JSON object and nothing after it."}
	}
	return nil
}

// jsonMediaType reports whether a Content-Type value is JSON: application/json
// or a +json type, with any parameters.
//
// A body must say so. Without a Content-Type, or with text/plain, a browser
// sends a cross-origin POST without asking the server first (no CORS
// preflight), so a web page could take a lock on a Baton its visitor reaches.
func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// hasBody reports whether a request comes with a body: a Content-Length above
// 0, or a chunked one (which may turn out empty).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &validationError{detail: fmt.Sprintf("The body is not valid JSON (at byte %d).", syn.Offset)}
	case errors.As(err, &typ):
		if typ.Field == "" {
			return &validationError{detail: "The body must be a JSON object."}
		}
		return invalid(typ.Field, "must be "+jsonType(typ.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(field, "unknown field")
	default:
		return &validationError{detail: "The body is not valid JSON."}
	}
}

func jsonType(goKind string) string {
	switch goKind {
	case "int64", "int", "ptr":
		return "an integer"
	case "bool":
		return "true or false"
	case "string":
		return "a string"
	default:
		return "of another type"
	}
}
