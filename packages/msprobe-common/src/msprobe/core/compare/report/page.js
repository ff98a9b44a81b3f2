const cols = ['Row', ...DATA.header], rows = DATA.rows;
let view = rows.map((r, i) => i), sortCol = -1, asc = true, limit = 2000;
function cell(v){ return v === null ? '' : String(v); }
function esc(v){ return cell(v).replace(/&/g,'&amp;').replace(/</g,'&lt;').replace(/"/g,'&quot;'); }
function val(r, i){ return i === 0 ? r.n : r.c[i - 1]; }
function render(){
  const q = document.getElementById('q').value.toLowerCase(), bad = document.getElementById('bad').checked;
  view = rows.map((r, i) => i).filter(i => (!bad || rows[i].h) &&
         (!q || rows[i].c.some(v => cell(v).toLowerCase().includes(q))));
  if (sortCol >= 0) view.sort((a, b) => { const x = val(rows[a], sortCol), y = val(rows[b], sortCol);
    const nx = typeof x === 'number', ny = typeof y === 'number';
    const d = nx && ny ? (x - y || 0) : nx ? -1 : ny ? 1 : cell(x).localeCompare(cell(y));
    return asc ? d : -d; });
  const body = view.slice(0, limit).map(i => '<tr class="' + rows[i].h + '"><td>' + rows[i].n + '</td>' +
    rows[i].c.map(v => '<td>' + esc(v) + '</td>').join('') + '</tr>');
  document.getElementById('tb').innerHTML = body.join('');
  document.getElementById('n').textContent = view.length + ' of ' + rows.length + ' rows' +
    (view.length > limit ? ' (first ' + limit + ' shown: refine the filter)' : '');
}
document.getElementById('th').innerHTML = cols.map((c, i) => '<th data-i="' + i + '">' + esc(c) + '</th>').join('');
document.getElementById('th').onclick = e => { const i = +e.target.dataset.i; if (isNaN(i)) return;
  asc = sortCol === i ? !asc : true; sortCol = i; render(); };
document.getElementById('q').oninput = render; document.getElementById('bad').onchange = render; render();
