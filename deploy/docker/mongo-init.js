// Run once by the mongo-init service of docker-compose.yml (mongosh).
// Initiates the single-node replica set rs0 if it is not yet initiated, then
// waits until this node is a writable primary, so that services start
// against a replica set where "w: majority" writes and change streams work.
// Idempotent: on later starts the replica set configuration is already
// stored (in the local database, in the mongo-data volume) and only the
// wait runs.

const config = { _id: 'rs0', members: [{ _id: 0, host: 'mongo:27017' }] };

try {
  rs.status();
} catch (e) {
  if (e.codeName !== 'NotYetInitialized') {
    throw e;
  }
  rs.initiate(config);
  print('replica set rs0 initiated');
}

for (let i = 0; i < 60; i++) {
  if (db.hello().isWritablePrimary) {
    print('replica set rs0 has a primary');
    quit(0);
  }
  sleep(1000);
}
print('replica set rs0 has no primary after 60s');
quit(1);
