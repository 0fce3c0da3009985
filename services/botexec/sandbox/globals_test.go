package sandbox

import (
	"testing"
)

// exprCase is a JavaScript expression and the string it must come to.
type exprCase struct {
	name string
	expr string
	want string
}

// runExprs runs each expression in its own bot as String(await (expr)).
func runExprs(t *testing.T, tests []exprCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, `exports.handler = async (medplum, event) => String(await (`+tt.expr+`));`, Event{}, nil, Limits{})
			mustSucceed(t, res)
			if res.Text != tt.want {
				t.Errorf("got  %q\nwant %q", res.Text, tt.want)
			}
		})
	}
}

// tryExpr is an expression that answers "Name: message" for what expr
// throws, or "ok".
func tryExpr(expr string) string {
	return `(() => { try { ` + expr + `; return 'ok' } catch (e) { return e.name + ': ' + e.message } })()`
}

func TestURLSearchParams(t *testing.T) {
	runExprs(t, []exprCase{
		{"getAll", `new URLSearchParams('?a=1&b=2&a=3').getAll('a').join()`, "1,3"},
		{"get missing", `new URLSearchParams('a=1').get('b')`, "null"},
		{"key without value", `new URLSearchParams('flag&x=1').get('flag') === ''`, "true"},
		{"empty parts skipped", `new URLSearchParams('&&a=1&').size`, "1"},
		{"plus is a space", `new URLSearchParams('q=a+b%2Bc').get('q')`, "a b+c"},
		{"has", `[new URLSearchParams('a=1').has('a'), new URLSearchParams('a=1').has('b')].join()`, "true,false"},
		{"set replaces the first, drops the rest", `(() => { const p = new URLSearchParams('a=1&b=2&a=3'); p.set('a', 'x'); return p.toString() })()`, "a=x&b=2"},
		{"set appends when missing", `(() => { const p = new URLSearchParams('a=1'); p.set('b', 2); return p.toString() })()`, "a=1&b=2"},
		{"delete", `(() => { const p = new URLSearchParams('a=1&b=2&a=3'); p.delete('a'); return p.toString() })()`, "b=2"},
		{"sort is stable", `(() => { const p = new URLSearchParams('b=1&a=2&b=0&a=1'); p.sort(); return p.toString() })()`, "a=2&a=1&b=1&b=0"},
		{"encoding", `new URLSearchParams({q: 'a b&c=d/é'}).toString()`, "q=a+b%26c%3Dd%2F%C3%A9"},
		{"from pairs", `new URLSearchParams([['a', 1], ['a', 2]]).toString()`, "a=1&a=2"},
		{"from a Map", `new URLSearchParams(new Map([['k', 'v']])).toString()`, "k=v"},
		{"from null", `new URLSearchParams(null).size`, "0"},
		{"forEach", `(() => { const out = []; new URLSearchParams('a=1&b=2').forEach((v, k) => out.push(k + v)); return out.join() })()`, "a1,b2"},
		{"keys values entries", `(() => { const p = new URLSearchParams('a=1&b=2'); return [[...p.keys()], [...p.values()], [...p.entries()].map(e => e.join(':')), [...p].length].join(' ') })()`, "a,b 1,2 a:1,b:2 2"},
	})
}

func TestURL(t *testing.T) {
	runExprs(t, []exprCase{
		{"parts", `(() => { const u = new URL('https://user:pw@a.example:8443/p?x=1#frag'); return [u.protocol, u.username, u.password, u.hostname, u.port, u.host, u.origin, u.pathname, u.search, u.hash].join(' ') })()`,
			"https: user pw a.example 8443 a.example:8443 https://a.example:8443 /p ?x=1 #frag"},
		{"href with credentials", `new URL('https://user:pw@a.example/p').href`, "https://user:pw@a.example/p"},
		{"no path is /", `new URL('https://a.example').href`, "https://a.example/"},
		{"no query", `new URL('https://a.example/p').search === ''`, "true"},
		{"editing the query changes href", `(() => { const u = new URL('https://a.example/p?x=1'); u.searchParams.delete('x'); return u.href })()`, "https://a.example/p"},
		{"JSON", `JSON.stringify({u: new URL('https://a.example/p')})`, `{"u":"https://a.example/p"}`},
		{"toString", `String(new URL('/b', 'https://a.example/a/'))`, "https://a.example/b"},
		{"a base without a scheme", tryExpr(`new URL('/b', 'nope')`), "TypeError: Invalid URL"},
		{"no scheme", tryExpr(`new URL('//a.example/p')`), "TypeError: Invalid URL"},
		{"unparseable", tryExpr(`new URL('https://a b:x/')`), "TypeError: Invalid URL"},
	})
}

func TestTextCoding(t *testing.T) {
	runExprs(t, []exprCase{
		{"encoding names", `new TextEncoder().encoding + ' ' + new TextDecoder('UTF8').encoding`, "utf-8 utf-8"},
		{"unsupported label", tryExpr(`new TextDecoder('latin1')`), `RangeError: The "latin1" encoding is not supported`},
		{"a view's own bytes", `new TextDecoder().decode(new Uint8Array([0x78, 0xc3, 0xa9, 0x79]).subarray(1, 3))`, "é"},
		{"an ArrayBuffer", `new TextDecoder().decode(new Uint8Array([0x68, 0x69]).buffer)`, "hi"},
		{"invalid UTF-8 is replaced", `new TextDecoder().decode(new Uint8Array([0x61, 0xff, 0x62]))`, "a\uFFFDb"},
		{"nothing", `new TextDecoder().decode() === ''`, "true"},
		{"not bytes", tryExpr(`new TextDecoder().decode('text')`), `TypeError: The "input" argument must be an ArrayBuffer or ArrayBufferView`},
		{"encode nothing", `new TextEncoder().encode().length`, "0"},
	})
}

func TestBase64(t *testing.T) {
	runExprs(t, []exprCase{
		{"whitespace is ignored", `atob(' aGVs\nbG8=\t')`, "hello"},
		{"padding is optional", `atob('aGVsbG8')`, "hello"},
		{"bytes become Latin-1", `Array.from(atob('/+8=')).map(c => c.charCodeAt(0)).join()`, "255,239"},
		{"not base64", tryExpr(`atob('***')`), "GoError: The string to be decoded is not correctly encoded."},
		{"btoa of Latin-1", `btoa('\u00ff\u00ef')`, "/+8="},
		{"btoa past Latin-1", tryExpr(`btoa('✓')`), "GoError: Invalid character"},
	})
}

func TestCoreShim(t *testing.T) {
	core := `require('@medplum/core')`
	runExprs(t, []exprCase{
		{"one frozen object", `[` + core + ` === ` + core + `, Object.isFrozen(` + core + `), Object.isFrozen(` + core + `.ContentType)].join()`, "true,true,true"},
		{"the globals", `[` + core + `.Hl7Message === Hl7Message, ` + core + `.OperationOutcomeError === OperationOutcomeError].join()`, "true,true"},
		{"content types", `JSON.stringify(` + core + `.ContentType)`, `{"JSON":"application/json","FHIR_JSON":"application/fhir+json","TEXT":"text/plain","HL7_V2":"x-application/hl7-v2+er7","FORM_URL_ENCODED":"application/x-www-form-urlencoded","JSON_PATCH":"application/json-patch+json"}`},
		{"allOk", `JSON.stringify(` + core + `.allOk)`, `{"resourceType":"OperationOutcome","id":"ok","issue":[{"severity":"information","code":"informational","details":{"text":"All OK"}}]}`},
		{"badRequest", `JSON.stringify(` + core + `.badRequest('Bad', 'Patient.name'))`, `{"resourceType":"OperationOutcome","issue":[{"severity":"error","code":"invalid","details":{"text":"Bad"},"expression":["Patient.name"]}]}`},
		{"isOperationOutcome", `[` + core + `.isOperationOutcome({resourceType: 'OperationOutcome'}), ` + core + `.isOperationOutcome(null), ` + core + `.isOperationOutcome('OperationOutcome')].join()`, "true,false,false"},
		{"operationOutcomeToString", core + `.operationOutcomeToString({issue: [{details: {text: 'A'}, expression: ['x', 'y']}, {diagnostics: 'B'}]})`, "A (x, y); B"},
		{"normalizeErrorString", `[undefined, 'text', new Error('err'), {resourceType: 'OperationOutcome', issue: [{diagnostics: 'oo'}]}, {message: 'msg'}, {a: 1}].map(` + core + `.normalizeErrorString).join('|')`, `Unknown error|text|err|oo|msg|{"a":1}`},
		{"getReferenceString", `[` + core + `.getReferenceString({resourceType: 'Patient', id: '1'}), ` + core + `.getReferenceString({reference: 'Observation/2'})].join()`, "Patient/1,Observation/2"},
		{"createReference", `JSON.stringify(` + core + `.createReference({resourceType: 'Patient', id: '1', name: []}))`, `{"reference":"Patient/1"}`},
		{"resolveId", core + `.resolveId({reference: 'Patient/9'})`, "9"},
		{"OperationOutcomeError", `(() => { const e = new OperationOutcomeError({resourceType: 'OperationOutcome', issue: [{details: {text: 'T'}}]}, 'why'); return [e.message, e.cause, e instanceof Error, e.name].join() })()`, "T,why,true,Error"},
		{"other modules", tryExpr(`require('@medplum/fhirtypes')`), "Error: Cannot require '@medplum/fhirtypes': modules are not available to bots"},
	})
}

func TestGlobalsReplaceable(t *testing.T) {
	// Globals built on first use can be replaced before and after that use,
	// as ordinary globals can.
	runExprs(t, []exprCase{
		{"before first use", `(() => { URL = 5; return typeof URL })()`, "number"},
		{"after first use", `(() => { const before = typeof URL; URL = 'x'; return before + ' ' + URL })()`, "function x"},
		{"not enumerable", `Object.keys(globalThis).filter(k => ['console', 'URL', 'Hl7Message', 'setTimeout', 'queueMicrotask'].includes(k)).length`, "0"},
		{"a bot's own console does not break the run", `(() => { console = {log() { throw new Error('x') }}; return 'fine' })()`, "fine"},
	})
}

func TestConsoleFormat(t *testing.T) {
	tests := []struct {
		name string
		args string
		want string
	}{
		{"%s %d", `'%s=%d', 'a', '42x'`, "a=NaN"},
		{"%i truncates", `'%i', '42.9'`, "42"},
		{"%f", `'%f', '1.5x'`, "1.5"},
		{"%j %o %O", `'%j %o %O', {a: 1}, [2], 'x'`, `{"a":1} [2] x`},
		{"%%", `'100%% %s', 'done'`, "100% done"},
		{"missing arguments", `'%s and %s', 'a'`, "a and %s"},
		{"unknown directive", `'%x %s', 'a'`, "%x a"},
		{"extra arguments", `'%s', 'a', 'b', 3`, "a b 3"},
		{"% in a lone string", `'50%'`, "50%"},
		{"% not first", `1, '%s', 2`, "1 %s 2"},
		{"named function", `function named() {}`, "[Function: named]"},
		{"anonymous function", `[() => 1][0]`, "[Function: anonymous]"},
		{"symbol", `Symbol('s')`, "Symbol(s)"},
		{"a cycle", `(() => { const a = {}; a.a = a; return a })()`, "[object Object]"},
		{"a class instance with a cycle", `(() => { class Node { constructor() { this.self = this } } return new Node() })()`, "[object Node]"},
		{"a bigint in an object", `{n: 1n}`, "[object Object]"},
		{"an object JSON drops", `{toJSON() { return undefined }}`, "[object Object]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runBot(t, `exports.handler = async () => { console.log(`+tt.args+`) };`, Event{}, nil, Limits{})
			mustSucceed(t, res)
			if res.Log != tt.want+"\n" {
				t.Errorf("log %q, want %q", res.Log, tt.want+"\n")
			}
		})
	}
	t.Run("an Error logs its stack", func(t *testing.T) {
		res := runBot(t, `exports.handler = async () => { console.error(new RangeError('bad')) };`, Event{}, nil, Limits{})
		mustSucceed(t, res)
		if want := "RangeError: bad\n\tat "; len(res.Log) < len(want) || res.Log[:len(want)] != want {
			t.Errorf("log %q", res.Log)
		}
	})
	t.Run("every level logs", func(t *testing.T) {
		res := runBot(t, `exports.handler = async () => { for (const l of ['log', 'info', 'warn', 'error', 'debug', 'trace']) console[l](l) };`, Event{}, nil, Limits{})
		mustSucceed(t, res)
		if res.Log != "log\ninfo\nwarn\nerror\ndebug\ntrace\n" {
			t.Errorf("log %q", res.Log)
		}
	})
}

func TestLogBuffer(t *testing.T) {
	tests := []struct {
		name      string
		max       int
		writes    []string
		want      string
		truncated bool
	}{
		{"fits", 10, []string{"abc", "de"}, "abc\nde\n", false},
		{"exactly full", 4, []string{"abc"}, "abc\n", false},
		{"cut where it stops fitting", 10, []string{"abc", "defghijk", "more"}, "abc\ndefghi\n... [log truncated at 10 bytes]\n", true},
		{"cut on a character boundary", 5, []string{"aé€"}, "aé\n... [log truncated at 5 bytes]\n", true},
		{"full already", 4, []string{"abc", "d"}, "abc\n\n... [log truncated at 4 bytes]\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &logBuffer{max: tt.max}
			for _, w := range tt.writes {
				l.write(w)
			}
			got, truncated := l.result()
			if got != tt.want || truncated != tt.truncated {
				t.Errorf("got %q %v, want %q %v", got, truncated, tt.want, tt.truncated)
			}
		})
	}
}
