package main

import (
	"fmt"
	"time"
)

// The Patients the bench loads look like a population rather than a
// sequence, so that each search shape matches the share of the store it
// would in a real project: family names skewed as surnames are ("Smith"
// about 1% of patients, a long tail of rare names), given names starting
// "Mar" about 9%, birth dates spread over 1920-2020, four genders, a city.
// Each field is a hash of the patient's index: the same index gives the
// same Patient in every run, and neighbouring indexes are unrelated.

// weighted is a name with its share per 10,000 patients.
type weighted struct {
	name string
	per  int
}

// families are the common surnames, per 10,000 patients, falling off
// roughly as 1/rank^0.7; the rest of the patients (the tail) get a
// composed surname that is rare. Seven of them contain "mit".
var families = []weighted{
	{"Smith", 100}, {"Johnson", 62}, {"Williams", 48}, {"Brown", 40}, {"Jones", 35},
	{"Garcia", 31}, {"Miller", 28}, {"Davis", 25}, {"Rodriguez", 23}, {"Martinez", 22},
	{"Hernandez", 20}, {"Lopez", 19}, {"Gonzalez", 18}, {"Wilson", 17}, {"Anderson", 16},
	{"Thomas", 16}, {"Taylor", 15}, {"Moore", 14}, {"Jackson", 14}, {"Martin", 13},
	{"Lee", 13}, {"Perez", 12}, {"Thompson", 12}, {"White", 12}, {"Harris", 11},
	{"Sanchez", 11}, {"Clark", 11}, {"Ramirez", 10}, {"Lewis", 10}, {"Robinson", 10},
	{"Walker", 10}, {"Young", 9}, {"Allen", 9}, {"King", 9}, {"Wright", 9},
	{"Scott", 9}, {"Torres", 8}, {"Nguyen", 8}, {"Hill", 8}, {"Flores", 8},
	{"Mitchell", 8}, {"Marshall", 6}, {"Schmitt", 5}, {"Smithers", 3}, {"Goldsmith", 3},
	{"Smithson", 2}, {"Mitra", 2}, {"Schmidt", 5}, {"Brooks", 6}, {"Wilkins", 4},
}

// givens are the given names per 10,000 patients; the eight starting
// "Mar" add up to 900 (9%). Dmitri contains "mit".
var givens = []weighted{
	{"Maria", 250}, {"Mary", 200}, {"Mark", 150}, {"Martin", 100}, {"Marta", 50},
	{"Marcus", 50}, {"Margaret", 50}, {"Marie", 50},
	{"James", 330}, {"John", 320}, {"Robert", 310}, {"Michael", 300}, {"William", 280},
	{"David", 270}, {"Jennifer", 260}, {"Linda", 250}, {"Elizabeth", 240}, {"Barbara", 230},
	{"Susan", 220}, {"Jessica", 210}, {"Sarah", 200}, {"Karen", 190}, {"Joseph", 190},
	{"Thomas", 180}, {"Charles", 180}, {"Christopher", 170}, {"Daniel", 170}, {"Matthew", 160},
	{"Anthony", 160}, {"Donald", 150}, {"Paul", 150}, {"Steven", 150}, {"Andrew", 140},
	{"Joshua", 140}, {"Kenneth", 130}, {"Kevin", 130}, {"Brian", 130}, {"George", 120},
	{"Nancy", 120}, {"Lisa", 120}, {"Betty", 110}, {"Sandra", 110}, {"Ashley", 110},
	{"Kimberly", 100}, {"Emily", 100}, {"Donna", 100}, {"Michelle", 100}, {"Dorothy", 90},
	{"Carol", 90}, {"Amanda", 90}, {"Melissa", 90}, {"Deborah", 80}, {"Stephanie", 80},
	{"Rebecca", 80}, {"Laura", 80}, {"Sharon", 80}, {"Cynthia", 70}, {"Kathleen", 70},
	{"Amy", 70}, {"Angela", 70}, {"Helen", 70}, {"Anna", 70}, {"Brenda", 60},
	{"Pamela", 60}, {"Nicole", 60}, {"Samantha", 60}, {"Katherine", 60}, {"Emma", 60},
	{"Ruth", 50}, {"Christine", 50}, {"Rachel", 50}, {"Janet", 50}, {"Olivia", 50},
	{"Wei", 50}, {"Aisha", 50}, {"Jose", 50}, {"Luis", 50}, {"Dmitri", 20},
}

// cities are where the patients live, per 10,000.
var cities = []weighted{
	{"Springfield", 1500}, {"Riverside", 1100}, {"Franklin", 900}, {"Greenville", 800},
	{"Bristol", 700}, {"Clinton", 650}, {"Fairview", 600}, {"Salem", 550}, {"Madison", 500},
	{"Georgetown", 450}, {"Arlington", 400}, {"Ashland", 350}, {"Dover", 300},
	{"Oxford", 300}, {"Jackson", 250}, {"Burlington", 200}, {"Manchester", 150}, {"Lakewood", 300},
}

// namePrefixes are the 3-letter prefixes the 16-client searches rotate
// through: each matches many patients (a family, a given name, or both).
var namePrefixes = []string{"mar", "smi", "joh", "wil", "jam", "mic", "dav", "bro", "jen", "eli"}

// tailSyllables compose the rare surnames; none contains "mit", and no
// composed name starts with a prefix of namePrefixes.
var tailSyllables = []string{"ka", "lo", "ren", "vo", "sta", "ne", "gu", "ber", "tor", "pel", "ha", "qui", "zo", "den", "fa", "rus"}

// mix is splitmix64: a well-spread hash of the index and a per-field salt.
func mix(i int, salt uint64) uint64 {
	z := uint64(i)*0x9e3779b97f4a7c15 + salt*0xbf58476d1ce4e5b9 + 0x94d049bb133111eb
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// pick answers the name whose share holds u (0..9999), or "" past them all.
func pick(list []weighted, u int) string {
	for _, w := range list {
		if u < w.per {
			return w.name
		}
		u -= w.per
	}
	return ""
}

var (
	birthFrom = time.Date(1920, 1, 1, 0, 0, 0, 0, time.UTC)
	birthDays = int(time.Date(2020, 12, 31, 0, 0, 0, 0, time.UTC).Sub(birthFrom).Hours() / 24)
)

// patientBody is the i-th Patient of the bench's population.
func patientBody(i int) map[string]any {
	family := pick(families, int(mix(i, 1)%10000))
	if family == "" {
		// The tail: three syllables, 16^3 surnames, each rare.
		h := mix(i, 2)
		s := tailSyllables[h%16] + tailSyllables[(h>>8)%16] + tailSyllables[(h>>16)%16]
		family = string(s[0]-'a'+'A') + s[1:]
	}
	given := pick(givens, int(mix(i, 3)%10000))
	if given == "" {
		given = "Alex"
	}
	gender := "female"
	switch g := mix(i, 4) % 100; {
	case g < 48:
		gender = "male"
	case g < 96:
		gender = "female"
	case g < 98:
		gender = "other"
	default:
		gender = "unknown"
	}
	birth := birthFrom.AddDate(0, 0, int(mix(i, 5)%uint64(birthDays+1)))
	return map[string]any{
		"resourceType": "Patient",
		"name":         []any{map[string]any{"given": []any{given}, "family": family}},
		"gender":       gender,
		"birthDate":    birth.Format(time.DateOnly),
		"address": []any{map[string]any{
			"line":       []any{fmt.Sprintf("%d Main Street", 1+mix(i, 6)%999)},
			"city":       pick(cities, int(mix(i, 7)%10000)),
			"postalCode": fmt.Sprintf("%05d", mix(i, 8)%100000),
		}},
	}
}
