document.querySelectorAll('[data-copy]').forEach(function (b) {
  b.addEventListener('click', function () {
    var field = document.getElementById(b.getAttribute('data-copy'));
    field.select();
    if (navigator.clipboard) { navigator.clipboard.writeText(field.value); }
    b.textContent = 'Copied';
  });
});
