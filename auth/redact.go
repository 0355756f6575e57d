package auth

import (
	"fmt"
	"strings"
)

// keyLike reports whether s could be a key: 32 or more visible ASCII characters
// in a row. Error messages never repeat such a run from their input.
func keyLike(s string) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if s[i] > ' ' && s[i] < 0x7f {
			run++
			if run >= minKeyLen {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// show quotes s for an error message, or describes it when it could be a key.
func show(s string) string {
	if keyLike(s) {
		return fmt.Sprintf("(a value of %d characters, not shown)", len(s))
	}
	return fmt.Sprintf("%q", s)
}

// showByte names one character for an error message.
func showByte(c byte) string {
	if c == ' ' {
		return "a space"
	}
	if c > ' ' && c < 0x7f {
		return fmt.Sprintf("%q", string(c))
	}
	return fmt.Sprintf("the byte 0x%02x", c)
}

// redact replaces every run of 32 or more visible ASCII characters in s, a
// message from a parser that may quote its input, with a placeholder.
func redact(s string) string {
	if !keyLike(s) {
		return s
	}
	var b strings.Builder
	start := -1
	flush := func(end int) {
		if start < 0 {
			return
		}
		if end-start >= minKeyLen {
			b.WriteString("(…)")
		} else {
			b.WriteString(s[start:end])
		}
		start = -1
	}
	for i := 0; i < len(s); i++ {
		if s[i] > ' ' && s[i] < 0x7f {
			if start < 0 {
				start = i
			}
			continue
		}
		flush(i)
		b.WriteByte(s[i])
	}
	flush(len(s))
	return b.String()
}
