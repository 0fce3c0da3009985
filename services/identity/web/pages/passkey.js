// Passkeys: the only script of Pinion's sign-in pages, allowed by its
// hash. A form marked data-passkey ("create" or "get") carries the
// server's WebAuthn options; submitting it asks the browser for the
// passkey, then posts the browser's answer in its "credential" field.
(function () {
  function bytes(s) {
    s = s.replace(/-/g, '+').replace(/_/g, '/');
    while (s.length % 4) s += '=';
    return Uint8Array.from(atob(s), function (c) { return c.charCodeAt(0); });
  }
  function text(buf) {
    var s = '';
    new Uint8Array(buf).forEach(function (b) { s += String.fromCharCode(b); });
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }
  function ids(list) {
    (list || []).forEach(function (c) { c.id = bytes(c.id); });
  }
  document.querySelectorAll('form[data-passkey]').forEach(function (form) {
    form.addEventListener('submit', function (ev) {
      var field = form.querySelector('input[name=credential]');
      if (field.value) return;
      ev.preventDefault();
      var status = form.querySelector('.passkey-status');
      if (!window.PublicKeyCredential) {
        status.textContent = 'This browser has no passkeys.';
        return;
      }
      var pk = JSON.parse(form.getAttribute('data-options')).publicKey;
      pk.challenge = bytes(pk.challenge);
      var call;
      if (form.getAttribute('data-passkey') === 'create') {
        pk.user.id = bytes(pk.user.id);
        ids(pk.excludeCredentials);
        call = navigator.credentials.create({ publicKey: pk });
      } else {
        ids(pk.allowCredentials);
        call = navigator.credentials.get({ publicKey: pk });
      }
      status.textContent = 'Waiting for your passkey…';
      call.then(function (cred) {
        var r = cred.response;
        var out = { id: cred.id, rawId: text(cred.rawId), type: cred.type,
          clientExtensionResults: cred.getClientExtensionResults(),
          response: { clientDataJSON: text(r.clientDataJSON) } };
        if (r.attestationObject) {
          out.response.attestationObject = text(r.attestationObject);
          if (r.getTransports) out.response.transports = r.getTransports();
        } else {
          out.response.authenticatorData = text(r.authenticatorData);
          out.response.signature = text(r.signature);
          if (r.userHandle) out.response.userHandle = text(r.userHandle);
        }
        field.value = JSON.stringify(out);
        form.submit();
      }, function (err) {
        status.textContent = 'The passkey was not used (' + err.name + '). Try again.';
      });
    });
  });
})();
