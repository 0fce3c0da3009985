package repo

// strictTypes are the resources that grant or revoke access: who a user
// is, which projects they belong to and under which policy, which clients
// and bots may act, and sign-in state. The store lets no one read a write
// of them before it is durable (store.Write.Strict), so that nothing is
// granted on a change a power loss could undo.
var strictTypes = map[string]bool{
	"Project": true, "ProjectMembership": true, "User": true, "UserSecurityRequest": true,
	"ClientApplication": true, "AccessPolicy": true, "Bot": true,
	"Login": true, "JsonWebKey": true, "DomainConfiguration": true,
}
