// The JavaScript half of the bot runtime. It is compiled once per process and
// evaluated in every fresh runtime: the expression below is a function that
// Go calls with `native`, the host bindings of that one run. Everything the
// bot can reach is defined here; `native` itself never becomes a global, so a
// bot only gets at the host through the objects built on top of it.
(function (native) {
  'use strict';
  const g = globalThis;
  const nativeStringify = JSON.stringify;
  const jsonParse = JSON.parse;
  const FHIR_JSON = 'application/fhir+json';
  const HL7_V2 = 'x-application/hl7-v2+er7';

  function define(name, value) {
    Object.defineProperty(g, name, { value, writable: true, configurable: true, enumerable: false });
  }
  // Classes that most bots never touch are built on first use, which keeps
  // the per-run cost of a fresh global scope low.
  function defineLazy(name, make) {
    Object.defineProperty(g, name, {
      configurable: true,
      enumerable: false,
      get() {
        const v = make();
        define(name, v);
        return v;
      },
      set(v) {
        define(name, v);
      },
    });
  }
  function once(make) {
    let v;
    return () => (v === undefined ? (v = make()) : v);
  }

  // ---- console: Node's util.format, roughly, into the captured log.
  defineLazy('console', () => {
    function inspect(a) {
      if (typeof a === 'string') return a;
      if (a instanceof Error) return a.stack || String(a);
      if (typeof a === 'function') return '[Function: ' + (a.name || 'anonymous') + ']';
      if (typeof a === 'object' && a !== null) {
        try {
          const s = jsonStringify(a);
          return s === undefined ? String(a) : s;
        } catch (e) {
          return '[object ' + (a.constructor && a.constructor.name ? a.constructor.name : 'Object') + ']';
        }
      }
      return String(a);
    }
    function format(args) {
      const out = [];
      let i = 0;
      if (typeof args[0] === 'string' && args.length > 1 && args[0].indexOf('%') >= 0) {
        i = 1;
        out.push(
          args[0].replace(/%[sdifjoO%]/g, (m) => {
            if (m === '%%') return '%';
            if (i >= args.length) return m;
            const a = args[i++];
            switch (m) {
              case '%s':
                return typeof a === 'string' ? a : inspect(a);
              case '%d':
                return String(Number(a));
              case '%i':
                return String(parseInt(a, 10));
              case '%f':
                return String(parseFloat(a));
              default:
                return inspect(a);
            }
          })
        );
      }
      for (; i < args.length; i++) out.push(inspect(args[i]));
      return out.join(' ');
    }
    const log = (...args) => native.log(format(args));
    return { log, info: log, warn: log, error: log, debug: log, trace: log };
  });

  // ---- timers (setTimeout and friends), atob and btoa are Go functions
  // defined on the global object by the host.
  define('queueMicrotask', (fn) => {
    Promise.resolve().then(fn);
  });

  // ---- allocation caps. goja has no allocator limit; the memory guard in Go
  // catches growth between samples, and these stop the single native calls
  // that could allocate gigabytes before it gets a chance to look.
  //
  // The checks use intrinsics captured here, before bot code runs, and pass
  // the values they checked (not the bot's objects, whose valueOf could
  // answer differently the second time) to the built-in.
  const maxString = native.maxStringLength;
  // Reflect.apply without Reflect: goja builds the whole Reflect object on
  // first touch, a twentieth of what a fresh runtime allocates.
  const apply = Function.prototype.call.bind(Function.prototype.apply);
  const toStr = String;
  const toNum = Number;
  const isArray = Array.isArray;
  const MapCtor = Map;
  // Called as memoGet(memo, x): no argument array per call, as apply needs.
  const memoGet = Function.prototype.call.bind(Map.prototype.get);
  const memoSet = Function.prototype.call.bind(Map.prototype.set);
  const objectKeys = Object.keys;
  function capString(name) {
    const orig = String.prototype[name];
    Object.defineProperty(String.prototype, name, {
      value: {
        [name](n, ...rest) {
          if (this === null || this === undefined) return apply(orig, this, [n, ...rest]);
          const str = toStr(this);
          const count = toNum(n);
          if ((name === 'repeat' ? str.length * count : count) > maxString) throw new RangeError('Invalid string length');
          return apply(orig, str, [count, ...rest]);
        },
      }[name],
      writable: true,
      configurable: true,
      enumerable: false,
    });
  }
  capString('repeat');
  capString('padStart');
  capString('padEnd');
  const maxArray = maxString / 8;
  const origFill = Array.prototype.fill;
  Object.defineProperty(Array.prototype, 'fill', {
    value: function fill(...args) {
      if (this !== null && this !== undefined && toNum(this.length) > maxArray) throw new RangeError('Invalid array length');
      return apply(origFill, this, args);
    },
    writable: true,
    configurable: true,
    enumerable: false,
  });
  const origFrom = Array.from;
  Object.defineProperty(Array, 'from', {
    value: function from(items, ...rest) {
      if (items !== null && items !== undefined && toNum(items.length) > maxArray) {
        throw new RangeError('Invalid array length');
      }
      return apply(origFrom, this, [items, ...rest]);
    },
    writable: true,
    configurable: true,
    enumerable: false,
  });

  // JSON.stringify walks plain data in Go, where an interrupt cannot reach:
  // goja's cycle check makes deep nesting quadratic, and an object that
  // shares sub-objects expands exponentially. Measuring first, in JavaScript
  // (which can be interrupted), turns both into a RangeError. Shared
  // sub-objects are measured once and counted every time they appear.
  const maxDepth = native.maxJSONDepth;
  function jsonCost(x, depth, memo) {
    if (typeof x === 'string') return x.length + 2;
    if (x === null || typeof x !== 'object') return 8;
    const known = memoGet(memo, x);
    // -1 marks an object on the current path: a cycle, left for stringify to
    // report. toJSON runs bot code, which can be interrupted, and what it
    // returns is measured by the replacer hook.
    if (known !== undefined) return known < 0 ? 8 : known;
    if (typeof x.toJSON === 'function') return 8;
    if (depth > maxDepth) throw new RangeError('Object nested too deeply to serialize (over ' + maxDepth + ' levels)');
    memoSet(memo, x, -1);
    let n = 2;
    if (isArray(x)) {
      for (let i = 0; i < x.length; i++) n += jsonCost(x[i], depth + 1, memo) + 1;
    } else {
      // Own enumerable keys, as JSON.stringify takes them; for...in walked
      // the prototype chain too, building Object.prototype's every time.
      const keys = objectKeys(x);
      for (let i = 0; i < keys.length; i++) n += jsonCost(x[keys[i]], depth + 1, memo) + keys[i].length + 4;
    }
    if (n > maxString) throw new RangeError('Object too large to serialize');
    memoSet(memo, x, n);
    return n;
  }
  function jsonStringify(value, replacer, space) {
    if (value !== null && typeof value === 'object') {
      const memo = new MapCtor();
      jsonCost(value, 0, memo);
      if (typeof replacer === 'function') {
        const user = replacer;
        replacer = function (k, v) {
          const r = apply(user, this, [k, v]);
          if (r !== null && typeof r === 'object') jsonCost(r, 0, memo);
          return r;
        };
      }
    }
    return apply(nativeStringify, undefined, [value, replacer, space]);
  }
  Object.defineProperty(JSON, 'stringify', {
    value: function stringify(value, replacer, space) {
      return jsonStringify(value, replacer, space);
    },
    writable: true,
    configurable: true,
    enumerable: false,
  });

  // ---- outcomes and errors, as @medplum/core shapes them.
  const oo = once(() => {
    function isOperationOutcome(v) {
      return v !== null && typeof v === 'object' && v.resourceType === 'OperationOutcome';
    }
    function issueToString(issue) {
      let s = (issue.details && issue.details.text) || issue.diagnostics || 'Unknown error';
      if (issue.expression && issue.expression.length) s += ' (' + issue.expression.join(', ') + ')';
      return s;
    }
    function operationOutcomeToString(outcome) {
      const issues = (outcome && outcome.issue) || [];
      return issues.map(issueToString).join('; ') || 'Unknown error';
    }
    class OperationOutcomeError extends Error {
      constructor(outcome, cause) {
        super(operationOutcomeToString(outcome));
        this.outcome = outcome;
        if (cause !== undefined) this.cause = cause;
      }
    }
    function outcome(id, code, text, expression) {
      const issue = { severity: 'error', code, details: { text } };
      if (expression) issue.expression = [expression];
      const o = { resourceType: 'OperationOutcome', issue: [issue] };
      if (id) o.id = id;
      return o;
    }
    const allOk = {
      resourceType: 'OperationOutcome',
      id: 'ok',
      issue: [{ severity: 'information', code: 'informational', details: { text: 'All OK' } }],
    };
    const badRequest = (text, expression) => outcome(undefined, 'invalid', text, expression);
    function statusOutcome(status, text) {
      switch (status) {
        case 401:
          return outcome('unauthorized', 'login', 'Unauthorized');
        case 403:
          return outcome('forbidden', 'forbidden', 'Forbidden');
        case 404:
          return outcome('not-found', 'not-found', 'Not found');
        case 409:
          return outcome('conflict', 'conflict', text || 'Conflict');
        case 410:
          return outcome('gone', 'deleted', 'Gone');
        case 429:
          return outcome('too-many-requests', 'throttled', 'Too Many Requests');
      }
      if (status >= 500) return outcome(undefined, 'exception', text || 'Internal server error');
      return badRequest(text || 'Request failed with status ' + status);
    }
    function normalizeErrorString(e) {
      if (e === undefined || e === null) return 'Unknown error';
      if (typeof e === 'string') return e;
      if (e instanceof Error) return e.message;
      if (isOperationOutcome(e)) return operationOutcomeToString(e);
      if (typeof e === 'object' && isOperationOutcome(e.outcome)) return operationOutcomeToString(e.outcome);
      if (typeof e === 'object' && typeof e.message === 'string') return e.message;
      try {
        return jsonStringify(e);
      } catch (x) {
        return String(e);
      }
    }
    return { isOperationOutcome, operationOutcomeToString, OperationOutcomeError, allOk, badRequest, statusOutcome, normalizeErrorString };
  });
  defineLazy('OperationOutcomeError', () => oo().OperationOutcomeError);

  // ---- URLSearchParams and URL (parsed by Go's net/url).
  const makeSearchParams = once(() => {
    const dec = (s) => decodeURIComponent(s.replace(/\+/g, ' '));
    const enc = (s) => encodeURIComponent(s).replace(/%20/g, '+');
    class URLSearchParams {
      #list = [];
      constructor(init) {
        if (init === undefined || init === null) return;
        if (typeof init === 'string') {
          const s = init[0] === '?' ? init.slice(1) : init;
          for (const part of s.split('&')) {
            if (!part) continue;
            const i = part.indexOf('=');
            this.#list.push(i < 0 ? [dec(part), ''] : [dec(part.slice(0, i)), dec(part.slice(i + 1))]);
          }
        } else if (typeof init[Symbol.iterator] === 'function') {
          for (const [k, v] of init) this.#list.push([String(k), String(v)]);
        } else {
          for (const k of Object.keys(init)) this.#list.push([k, String(init[k])]);
        }
      }
      get size() {
        return this.#list.length;
      }
      append(k, v) {
        this.#list.push([String(k), String(v)]);
      }
      delete(k) {
        k = String(k);
        this.#list = this.#list.filter((e) => e[0] !== k);
      }
      get(k) {
        const e = this.#list.find((e) => e[0] === String(k));
        return e ? e[1] : null;
      }
      getAll(k) {
        return this.#list.filter((e) => e[0] === String(k)).map((e) => e[1]);
      }
      has(k) {
        return this.#list.some((e) => e[0] === String(k));
      }
      set(k, v) {
        k = String(k);
        const i = this.#list.findIndex((e) => e[0] === k);
        if (i < 0) {
          this.#list.push([k, String(v)]);
          return;
        }
        this.#list[i][1] = String(v);
        this.#list = this.#list.filter((e, j) => j <= i || e[0] !== k);
      }
      sort() {
        this.#list.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
      }
      forEach(fn, thisArg) {
        for (const [k, v] of this.#list) fn.call(thisArg, v, k, this);
      }
      *keys() {
        for (const e of this.#list) yield e[0];
      }
      *values() {
        for (const e of this.#list) yield e[1];
      }
      *entries() {
        for (const e of this.#list) yield [e[0], e[1]];
      }
      [Symbol.iterator]() {
        return this.entries();
      }
      toString() {
        return this.#list.map((e) => enc(e[0]) + '=' + enc(e[1])).join('&');
      }
    }
    return URLSearchParams;
  });
  defineLazy('URLSearchParams', makeSearchParams);
  defineLazy('URL', () => {
    const SP = makeSearchParams();
    class URL {
      constructor(url, base) {
        const p = native.call('parseURL', String(url), base === undefined ? '' : String(base));
        this.protocol = p.protocol;
        this.username = p.username;
        this.password = p.password;
        this.hostname = p.hostname;
        this.port = p.port;
        this.pathname = p.pathname;
        this.hash = p.hash;
        this.searchParams = new SP(p.search);
      }
      get host() {
        return this.port ? this.hostname + ':' + this.port : this.hostname;
      }
      get origin() {
        return this.protocol + '//' + this.host;
      }
      get search() {
        const s = this.searchParams.toString();
        return s ? '?' + s : '';
      }
      get href() {
        const auth = this.username ? this.username + (this.password ? ':' + this.password : '') + '@' : '';
        return this.protocol + '//' + auth + this.host + this.pathname + this.search + this.hash;
      }
      toString() {
        return this.href;
      }
      toJSON() {
        return this.href;
      }
    }
    return URL;
  });
  defineLazy('TextEncoder', () => {
    return class TextEncoder {
      get encoding() {
        return 'utf-8';
      }
      encode(s = '') {
        return new Uint8Array(native.call('utf8Encode', String(s)));
      }
    };
  });
  defineLazy('TextDecoder', () => {
    return class TextDecoder {
      constructor(label = 'utf-8') {
        const l = String(label).toLowerCase();
        if (l !== 'utf-8' && l !== 'utf8') throw new RangeError('The "' + label + '" encoding is not supported');
      }
      get encoding() {
        return 'utf-8';
      }
      decode(input) {
        if (input === undefined) return '';
        if (input instanceof ArrayBuffer) return native.call('utf8Decode', input, 0, input.byteLength);
        if (ArrayBuffer.isView(input)) return native.call('utf8Decode', input.buffer, input.byteOffset, input.byteLength);
        throw new TypeError('The "input" argument must be an ArrayBuffer or ArrayBufferView');
      }
    };
  });

  // ---- HL7 v2, shaped like @medplum/core's Hl7Message/Hl7Segment/Hl7Field.
  // Parsing and formatting happen in Go (pkg/hl7): `enc` strings carry MSH-1
  // followed by MSH-2, and fields travel as Medplum's string[][]
  // (repetitions of components, subcomponents still joined).
  let hl7Made = false;
  const hl7 = once(() => {
    hl7Made = true;
    class Hl7Context {
      constructor(
        segmentSeparator = '\r',
        fieldSeparator = '|',
        componentSeparator = '^',
        repetitionSeparator = '~',
        escapeCharacter = '\\',
        subcomponentSeparator = '&',
        truncationCharacter = ''
      ) {
        this.segmentSeparator = segmentSeparator;
        this.fieldSeparator = fieldSeparator;
        this.componentSeparator = componentSeparator;
        this.repetitionSeparator = repetitionSeparator;
        this.escapeCharacter = escapeCharacter;
        this.subcomponentSeparator = subcomponentSeparator;
        if (truncationCharacter) this.truncationCharacter = truncationCharacter;
      }
      getMsh1() {
        return this.fieldSeparator;
      }
      getMsh2() {
        return (
          this.componentSeparator +
          this.repetitionSeparator +
          this.escapeCharacter +
          this.subcomponentSeparator +
          (this.truncationCharacter || '')
        );
      }
    }
    const encOf = (ctx) => ctx.getMsh1() + ctx.getMsh2();
    function contextOf(enc) {
      return new Hl7Context('\r', enc[0], enc[1], enc[2], enc[3], enc[4], enc.slice(5));
    }

    class Hl7Field {
      constructor(components, context = new Hl7Context()) {
        this.context = context;
        this.components = components;
      }
      get(component, subcomponent, repetition = 0) {
        return this.getComponent(component + 1, subcomponent, repetition);
      }
      getComponent(component, subcomponent, repetition = 0) {
        const rep = this.components[repetition];
        const value = (rep && rep[component - 1]) ?? '';
        if (subcomponent === undefined) return value;
        return native.call('hl7Subcomponent', String(value), encOf(this.context), subcomponent);
      }
      setComponent(component, value, subcomponent, repetition = 0) {
        if (component < 1 || (subcomponent !== undefined && subcomponent < 0)) return false;
        while (this.components.length <= repetition) this.components.push(['']);
        const rep = this.components[repetition];
        while (rep.length < component) rep.push('');
        rep[component - 1] =
          subcomponent === undefined
            ? String(value)
            : native.call('hl7SetSubcomponent', String(rep[component - 1] ?? ''), encOf(this.context), subcomponent, String(value));
        return true;
      }
      toString() {
        return native.call('hl7FormatField', encOf(this.context), this.components);
      }
      static parse(text, context = new Hl7Context()) {
        return new Hl7Field(native.call('hl7ParseField', String(text), encOf(context)), context);
      }
    }

    class Hl7Segment {
      constructor(fields, context = new Hl7Context()) {
        this.context = context;
        this.fields = fields.map((f) => (typeof f === 'string' ? Hl7Field.parse(f, context) : f));
        this.name = this.fields[0].components[0][0];
      }
      get(index) {
        return this.fields[index];
      }
      getField(index) {
        if (this.name === 'MSH') {
          if (index === 1) return new Hl7Field([[this.context.getMsh1()]], this.context);
          if (index === 2) return new Hl7Field([[this.context.getMsh2()]], this.context);
          if (index > 2) return this.fields[index - 1];
        }
        return this.fields[index];
      }
      getComponent(fieldIndex, component, subcomponent, repetition = 0) {
        const f = this.getField(fieldIndex);
        return f ? f.getComponent(component, subcomponent, repetition) : '';
      }
      setField(index, field) {
        if (this.name === 'MSH') {
          if (index === 1 || index === 2) return false;
          if (index > 2) index--;
        }
        while (this.fields.length <= index) this.fields.push(new Hl7Field([['']], this.context));
        this.fields[index] = typeof field === 'string' ? Hl7Field.parse(field, this.context) : field;
        return true;
      }
      setComponent(fieldIndex, component, value, subcomponent, repetition = 0) {
        const f = this.getField(fieldIndex);
        return f ? f.setComponent(component, value, subcomponent, repetition) : false;
      }
      toString() {
        return native.call('hl7FormatSegment', 
          encOf(this.context),
          this.fields.map((f) => f.components)
        );
      }
      static parse(text, context = new Hl7Context()) {
        return new Hl7Segment(
          native.call('hl7ParseSegment', String(text), encOf(context)).map((c) => new Hl7Field(c, context)),
          context
        );
      }
    }

    function hl7FromNative(p) {
      const ctx = contextOf(p.enc);
      return new Hl7Message(
        p.segments.map((fields) => new Hl7Segment(fields.map((c) => new Hl7Field(c, ctx)), ctx)),
        ctx
      );
    }
    function hl7Segments(msg) {
      return msg.segments.map((s) => s.fields.map((f) => f.components));
    }

    class Hl7Message {
      constructor(segments, context = new Hl7Context()) {
        this.context = context;
        this.segments = segments;
      }
      get header() {
        return this.segments[0];
      }
      get(index) {
        return this.getSegment(index);
      }
      getAll(name) {
        return this.getAllSegments(name);
      }
      getSegment(index) {
        if (typeof index === 'number') return this.segments[index];
        return this.segments.find((s) => s.name === index);
      }
      getAllSegments(name) {
        return this.segments.filter((s) => s.name === name);
      }
      setSegment(index, segment) {
        const i = typeof index === 'number' ? index : this.segments.findIndex((s) => s.name === index);
        if (i < 0) return false;
        if ((i === 0) !== (segment.name === 'MSH')) return false;
        if (i >= this.segments.length) this.segments.push(segment);
        else this.segments[i] = segment;
        return true;
      }
      toString() {
        return native.call('hl7Format', encOf(this.context), hl7Segments(this));
      }
      buildAck(options) {
        const ack = hl7FromNative(native.call('hl7BuildAck', encOf(this.context), hl7Segments(this), (options && options.ackCode) || 'AA'));
        if (options && options.errSegment) ack.segments.push(options.errSegment);
        return ack;
      }
      static parse(text) {
        return hl7FromNative(native.call('hl7Parse', String(text)));
      }
    }
    return { Hl7Context, Hl7Message, Hl7Segment, Hl7Field, hl7FromNative, hl7Segments, encOf };
  });
  // An indexed loop: for...of would build the iterator prototypes in every run.
  const hl7Names = ['Hl7Context', 'Hl7Message', 'Hl7Segment', 'Hl7Field'];
  for (let i = 0; i < hl7Names.length; i++) defineLazy(hl7Names[i], () => hl7()[hl7Names[i]]);

  // ---- the medplum client: every call is one Host.Request made by Go off
  // this goroutine; the promise settles back on the loop.
  const client = once(() => {
    // The error helpers are built only when something fails, and no regular
    // expression runs on the happy path: both cost more than the request.
    class OperationOutcomeError {
      constructor(outcome) {
        return new (oo().OperationOutcomeError)(outcome);
      }
    }
    const badRequest = (text) => oo().badRequest(text);
    const statusOutcome = (status, text) => oo().statusOutcome(status, text);
    const isOperationOutcome = (v) => v !== null && typeof v === 'object' && v.resourceType === 'OperationOutcome';
    function toPath(url) {
      let s = String(url);
      const scheme = s.indexOf('://');
      if (scheme > 0 && scheme === s.search(/[^a-zA-Z0-9+.-]/)) {
        let rest = s.slice(scheme + 3);
        const hash = rest.indexOf('#');
        if (hash >= 0) rest = rest.slice(0, hash);
        const i = rest.indexOf('/fhir/R4/');
        const query = rest.indexOf('?');
        if (i < 0 || (query >= 0 && i > query)) {
          throw new OperationOutcomeError(badRequest('Only FHIR API URLs can be reached from a bot: ' + s));
        }
        return rest.slice(i + '/fhir/R4/'.length);
      }
      let start = 0;
      while (s[start] === '/') start++;
      if (start) s = s.slice(start);
      if (s.startsWith('fhir/R4/')) s = s.slice('fhir/R4/'.length);
      return s;
    }
    function parseResponse(res) {
      let data = res.body;
      if (data === '') data = undefined;
      else if (String(res.contentType).toLowerCase().indexOf('json') >= 0) {
        try {
          data = jsonParse(data);
        } catch (e) {
          // Leave a body that is not JSON as text.
        }
      }
      if (res.status < 200 || res.status > 299) {
        throw new OperationOutcomeError(
          isOperationOutcome(data) ? data : statusOutcome(res.status, typeof data === 'string' ? data : undefined)
        );
      }
      return data;
    }
    function request(method, url, body, contentType) {
      let text;
      if (body !== undefined && body !== null) {
        if (typeof body === 'string') text = body;
        else if (hl7Made && body instanceof hl7().Hl7Message) {
          text = body.toString();
          contentType = contentType || HL7_V2;
        } else text = jsonStringify(body);
        contentType = contentType || FHIR_JSON;
      }
      let path;
      try {
        path = toPath(url);
      } catch (e) {
        return Promise.reject(e);
      }
      return native.request(method, path, text, contentType || '').then(parseResponse);
    }
    function queryString(query) {
      if (query === undefined || query === null) return '';
      if (typeof query === 'string') return query[0] === '?' ? query.slice(1) : query;
      const SP = makeSearchParams();
      if (query instanceof SP || (typeof query.append === 'function' && typeof query.entries === 'function')) {
        return query.toString();
      }
      if (Array.isArray(query)) return new SP(query).toString();
      const sp = new SP();
      for (const k of Object.keys(query)) {
        const v = query[k];
        if (v === undefined) continue;
        if (Array.isArray(v)) v.forEach((x) => sp.append(k, x));
        else sp.append(k, v);
      }
      return sp.toString();
    }
    function searchPath(type, query, extra) {
      let qs = queryString(query);
      if (extra) {
        const sp = new (makeSearchParams())(qs);
        for (const k of Object.keys(extra)) sp.set(k, extra[k]);
        qs = sp.toString();
      }
      return qs ? type + '?' + qs : type;
    }
    function requireArg(v, what) {
      if (v === undefined || v === null || v === '') {
        throw new OperationOutcomeError(badRequest('The "' + what + '" parameter cannot be null, undefined, or an empty string'));
      }
      return encodeURIComponent(String(v));
    }
    function attempt(fn) {
      try {
        return fn();
      } catch (e) {
        return Promise.reject(e);
      }
    }
    function toResourceArray(bundle) {
      const arr = ((bundle && bundle.entry) || []).map((e) => e.resource);
      return Object.assign(arr, { bundle });
    }
    return {
      get: (url) => request('GET', url),
      post: (url, body, contentType) => request('POST', url, body, contentType),
      put: (url, body, contentType) => request('PUT', url, body, contentType),
      patch: (url, ops) => request('PATCH', url, ops, 'application/json-patch+json'),
      delete: (url) => request('DELETE', url),
      createResource: (resource) =>
        attempt(() => {
          if (!resource || !resource.resourceType) throw new OperationOutcomeError(badRequest('Missing resourceType'));
          return request('POST', resource.resourceType, resource);
        }),
      readResource: (type, id) => attempt(() => request('GET', requireArg(type, 'resourceType') + '/' + requireArg(id, 'id'))),
      readReference: (ref) =>
        attempt(() => {
          const s = ref && ref.reference;
          if (!s || s.split('/').length !== 2) throw new OperationOutcomeError(badRequest('Invalid reference'));
          return request('GET', s);
        }),
      updateResource: (resource) =>
        attempt(() => {
          if (!resource || !resource.resourceType) throw new OperationOutcomeError(badRequest('Missing resourceType'));
          if (!resource.id) throw new OperationOutcomeError(badRequest('Missing id'));
          return request('PUT', resource.resourceType + '/' + encodeURIComponent(resource.id), resource);
        }),
      patchResource: (type, id, ops) =>
        attempt(() =>
          request('PATCH', requireArg(type, 'resourceType') + '/' + requireArg(id, 'id'), ops, 'application/json-patch+json')
        ),
      deleteResource: (type, id) => attempt(() => request('DELETE', requireArg(type, 'resourceType') + '/' + requireArg(id, 'id'))),
      search: (type, query) => attempt(() => request('GET', searchPath(String(type), query))),
      searchResources: (type, query) => attempt(() => request('GET', searchPath(String(type), query)).then(toResourceArray)),
      searchOne: (type, query) =>
        attempt(() =>
          request('GET', searchPath(String(type), query, { _count: '1' })).then((b) => b && b.entry && b.entry[0] && b.entry[0].resource)
        ),
      executeBot: (idOrIdentifier, body, contentType) =>
        attempt(() => {
          let url;
          if (typeof idOrIdentifier === 'string') url = 'Bot/' + requireArg(idOrIdentifier, 'id') + '/$execute';
          else if (idOrIdentifier && typeof idOrIdentifier === 'object') {
            url =
              'Bot/$execute?identifier=' +
              encodeURIComponent((idOrIdentifier.system || '') + '|' + (idOrIdentifier.value || ''));
          } else throw new OperationOutcomeError(badRequest('Bot id or identifier is required'));
          return request('POST', url, body, contentType);
        }),
    };
  });
  // The client's methods are made on first use: most bots call one or two,
  // and building all of them for every run would dominate a warm echo.
  const medplum = new Proxy(
    {},
    {
      get: (t, k) => client()[k],
      has: (t, k) => k in client(),
    }
  );

  // ---- require: no host modules. '@medplum/core' answers with the few
  // helpers defined above, so that bots written against Medplum still load.
  const core = once(() => {
    const { Hl7Context, Hl7Message, Hl7Segment, Hl7Field } = hl7();
    const { OperationOutcomeError, allOk, badRequest, isOperationOutcome, normalizeErrorString, operationOutcomeToString } =
      oo();
    return Object.freeze({
      Hl7Context,
      Hl7Message,
      Hl7Segment,
      Hl7Field,
      OperationOutcomeError,
      ContentType: Object.freeze({
        JSON: 'application/json',
        FHIR_JSON,
        TEXT: 'text/plain',
        HL7_V2,
        FORM_URL_ENCODED: 'application/x-www-form-urlencoded',
        JSON_PATCH: 'application/json-patch+json',
      }),
      allOk,
      badRequest,
      isOperationOutcome,
      normalizeErrorString,
      operationOutcomeToString,
      getReferenceString: (r) => (r && r.reference) || (r && r.resourceType + '/' + r.id),
      createReference: (r) => ({ reference: r.resourceType + '/' + r.id }),
      resolveId: (r) => r && r.reference && r.reference.split('/')[1],
    });
  });
  function require(name) {
    if (name === '@medplum/core') return core();
    throw new Error("Cannot require '" + name + "': modules are not available to bots");
  }

  // What Go needs from this run, captured before any bot code can replace
  // the globals they come from.
  return {
    medplum,
    require,
    hl7FromNative: (p) => hl7().hl7FromNative(p),
    isHl7: (v) => hl7Made && v instanceof hl7().Hl7Message,
    hl7ToString: (m) => native.call('hl7Format', hl7().encOf(m.context), hl7().hl7Segments(m)),
    stringify: (v) => jsonStringify(v),
    parse: (s) => jsonParse(s),
    errorInfo(e) {
      const { normalizeErrorString, isOperationOutcome } = oo();
      const info = { message: normalizeErrorString(e) };
      if (e instanceof Error && typeof e.stack === 'string') info.stack = e.stack;
      const o = e !== null && typeof e === 'object' ? e.outcome : undefined;
      if (isOperationOutcome(o)) info.outcome = jsonStringify(o);
      return info;
    },
  };
});
