package gateway

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/gofiber/fiber/v2"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// maxEncodings bounds how many Content-Encoding layers a body may carry:
// real clients send one; more only multiplies the work of undoing them.
const maxEncodings = 2

// requestBody is the request body with its Content-Encoding undone, never
// more than max bytes once decoded. Fiber's Ctx.Body decodes without any
// limit (a few kilobytes of nested gzip become gigabytes), so it is never
// called: this is the one place a body is decoded, and the gateway calls it
// only after the caller is authenticated. The raw bytes were already bounded
// by the server's BodyLimit.
//
// gzip, deflate (zlib, or raw deflate as some clients send it), br and
// identity are understood, up to maxEncodings layers applied in the order
// listed; anything else is 415. A body that grows past max is 413, one that
// does not decode is 400.
func requestBody(c *fiber.Ctx, max int) ([]byte, error) {
	if len(c.Request().Body()) > max {
		return nil, fhir.TooLarge("Request body too large")
	}
	var header []string
	for _, v := range c.Request().Header.PeekAll(fiber.HeaderContentEncoding) {
		header = append(header, string(v))
	}
	return decodeBody(header, c.Request().Body(), max)
}

// bodySlack is how far past the limit a body is still read, to be refused
// cleanly.
const bodySlack = 1 << 20

// decodeBody undoes the encodings the Content-Encoding header values name.
func decodeBody(header []string, raw []byte, max int) ([]byte, error) {
	var encodings []string
	for _, v := range header {
		for _, e := range strings.Split(v, ",") {
			e = strings.ToLower(strings.TrimSpace(e))
			if e != "" && e != "identity" {
				encodings = append(encodings, e)
			}
		}
	}
	if len(encodings) == 0 {
		return raw, nil
	}
	if len(encodings) > maxEncodings {
		return nil, unsupportedEncoding("at most 2 content encodings are accepted")
	}
	body := raw
	// The last encoding listed was applied last: undo it first.
	for i := len(encodings) - 1; i >= 0; i-- {
		var err error
		if body, err = decode(encodings[i], body, max); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// decode undoes one encoding, reading at most max+1 bytes of its output.
func decode(encoding string, in []byte, max int) ([]byte, error) {
	var r io.Reader
	switch encoding {
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(in))
		if err != nil {
			return nil, undecodable(encoding)
		}
		defer zr.Close()
		r = zr
	case "deflate":
		// HTTP's deflate is zlib-wrapped (RFC 9110 §8.4.1.2); some clients
		// send raw deflate, which zlib's header check tells apart.
		if zr, err := zlib.NewReader(bytes.NewReader(in)); err == nil {
			defer zr.Close()
			r = zr
		} else {
			fr := flate.NewReader(bytes.NewReader(in))
			defer fr.Close()
			r = fr
		}
	case "br":
		r = brotli.NewReader(bytes.NewReader(in))
	default:
		return nil, unsupportedEncoding("unsupported content encoding " + encoding)
	}
	var out bytes.Buffer
	n, err := out.ReadFrom(io.LimitReader(r, int64(max)+1))
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, undecodable(encoding)
	}
	if n > int64(max) {
		return nil, fhir.TooLarge("Request body too large once decoded")
	}
	if err != nil {
		return nil, undecodable(encoding)
	}
	return out.Bytes(), nil
}

func unsupportedEncoding(why string) *fhir.Error {
	e := fhir.UnsupportedMediaType()
	e.Outcome.Issue[0].Diagnostics = why
	return e
}

func undecodable(encoding string) *fhir.Error {
	return fhir.BadRequest("Content could not be decoded as " + encoding)
}
