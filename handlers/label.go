package handlers

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// maxLabel is the most characters (code points) a label may have.
const maxLabel = 128

// checkLabel validates a label: free text a client gives to be shown back to
// people (the owner of a lock, and every label the API takes later). A label is
// printable text of at most maxLabel characters: no control characters (C0
// U+0000-U+001F, DEL U+007F, C1 U+0080-U+009F), which a terminal, log viewer or
// dashboard showing the label would act on (a newline forges a log line, ESC [
// repaints a terminal), and nothing that is not UTF-8. encoding/json turns an
// invalid UTF-8 byte or a lone surrogate escape into U+FFFD before the label gets
// here, so U+FFFD is refused too: the label is not what the client meant to send.
// It returns a *validationError naming field.
func checkLabel(field, label string) error {
	if utf8.RuneCountInString(label) > maxLabel {
		return invalid(field, fmt.Sprintf("must be at most %d characters", maxLabel))
	}
	for i, r := range label {
		switch {
		case r == utf8.RuneError:
			return invalid(field, fmt.Sprintf("must be valid UTF-8 text (at character %d)", utf8.RuneCountInString(label[:i])))
		case unicode.IsControl(r):
			return invalid(field, fmt.Sprintf("must not hold control characters (%U at character %d)", r, utf8.RuneCountInString(label[:i])))
		}
	}
	return nil
}
