package identity

import "testing"

func TestSigninLimiter(t *testing.T) {
	l := newSigninLimiter()
	for i := 0; i < maxFailures; i++ {
		if err := l.allow("10.0.0.1", "a@example.com"); err != nil {
			t.Fatalf("refused after %d failures", i)
		}
		l.failed("10.0.0.1", "a@example.com")
	}
	if err := l.allow("10.0.0.2", "a@example.com"); err == nil {
		t.Fatal("guessing one account from another address is not slowed")
	}
	if err := l.allow("10.0.0.1", "b@example.com"); err != nil {
		t.Fatal("another account is locked by a neighbour's failures")
	}
	l.succeeded("a@example.com")
	if err := l.allow("10.0.0.2", "a@example.com"); err != nil {
		t.Fatal("a success does not clear the account's failures")
	}
	for i := 0; i < maxFailures*5; i++ {
		l.failed("10.0.0.9", "x"+string(rune('a'+i%26))+"@example.com")
	}
	if err := l.allow("10.0.0.9", "new@example.com"); err == nil {
		t.Fatal("an address spraying many accounts is not slowed")
	}
}
