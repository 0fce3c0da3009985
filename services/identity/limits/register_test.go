package limits

import (
	"fmt"
	"testing"
)

func TestRegistrationLimits(t *testing.T) {
	t.Run("per address, and a refusal counts nothing", func(t *testing.T) {
		l := NewSignIns()
		for i := range MaxRegistrationsPerAddress {
			if err := l.Register("10.4.0.1", fmt.Sprintf("p%d@d%d.example", i, i)); err != nil {
				t.Fatalf("registration %d: %v", i, err)
			}
		}
		for range 3 {
			tooMany(t, l.Register("10.4.0.1", "late@other.example"))
		}
		// Another address, and the domains the refused ones named, are not spent.
		if err := l.Register("10.4.0.2", "late@other.example"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("per domain, from many addresses", func(t *testing.T) {
		l := NewSignIns()
		for i := range maxRegistrationsPerDomain {
			if err := l.Register(fmt.Sprintf("10.5.%d.%d", i/250, i%250), fmt.Sprintf("p%d@throwaway.example", i)); err != nil {
				t.Fatalf("registration %d: %v", i, err)
			}
		}
		tooMany(t, l.Register("10.6.0.1", "one-more@throwaway.example"))
		if err := l.Register("10.6.0.1", "someone@elsewhere.example"); err != nil {
			t.Fatal(err)
		}
	})
}
