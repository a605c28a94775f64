// Drives `parley view` in headless Chromium through playwright-core: opens every page, checks
// its key content and links, and saves a screenshot of each. One browser for all pages.
// Input (environment): PLAYWRIGHT_CORE (the module's folder), VIEW_PLAN (JSON: base URL, output
// folder, the ids to visit). Prints one line per check; exits non-zero on the first failure.
'use strict';
const { chromium } = require(process.env.PLAYWRIGHT_CORE);
const fs = require('fs');
const path = require('path');

const plan = JSON.parse(process.env.VIEW_PLAN);
const base = plan.base.replace(/\/$/, '');
const shots = plan.out;

function check(ok, what) {
    if (!ok) throw new Error('check failed: ' + what);
    console.log('ok ' + what);
}

async function main() {
    const profile = fs.mkdtempSync(path.join(shots, 'profile-'));
    // A fresh, empty profile for every run; Playwright passes it as --user-data-dir.
    const context = await chromium.launchPersistentContext(profile, {
        executablePath: '/usr/bin/chromium',
        headless: true,
        viewport: { width: 1280, height: 900 },
        args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
            '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    });
    const page = context.pages()[0] || await context.newPage();
    // Anything hostile text managed to run would show as a dialog, a page error or a console
    // message about a blocked script; all three are collected and must stay empty.
    const dialogs = [], errors = [], blocked = [];
    page.on('dialog', d => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
    page.on('pageerror', e => errors.push(String(e)));
    page.on('console', m => { if (/Content Security Policy|Refused to/.test(m.text())) blocked.push(m.text()); });
    const statuses = {};
    page.on('response', r => { statuses[r.url()] = r.status(); });

    async function open(url, shot) {
        const response = await page.goto(base + url, { waitUntil: 'load' });
        check(response.status() === 200, `${url} answers 200 (got ${response.status()})`);
        if (shot) await page.screenshot({ path: path.join(shots, shot), fullPage: true });
    }
    const text = sel => page.locator(sel).first().innerText();

    // Runs.
    await open('/', 'runs.png');
    const runRows = await page.locator('#runs tbody tr').count();
    check(runRows === plan.runs.length, `the runs page lists ${plan.runs.length} runs (${runRows})`);
    const runsText = await text('#runs');
    check(runsText.includes('multi-step') && runsText.includes('stub-model'), 'runs show environment and model');
    await page.click(`#runs a[href="/runs/${plan.run}"]`);
    check(page.url().endsWith(`/runs/${plan.run}`), 'a run links to its page');

    // A run.
    await open(`/runs/${plan.run}`, 'run.png');
    const summary = await text('#summary');
    check(summary.includes('agent_stop'), 'the summary counts terminations');
    check(/\d\.\d{3} ± \d\.\d{3}/.test(await text('#reward')), 'the reward carries its 95% interval');
    check(await page.locator('#pass tbody tr').count() === plan.trials, 'pass@k and pass^k for every k');
    for (const id of ['plot-reward', 'plot-pass', 'plot-tasks', 'plot-latency']) {
        const marks = await page.locator(`#${id} svg rect, #${id} svg polyline`).count();
        check(marks > 0, `plot ${id} is drawn (${marks} marks)`);
    }
    const taskBars = await page.locator('#plot-tasks svg rect.bar').count();
    check(taskBars === plan.tasks, `one success bar per task (${taskBars})`);

    // Sessions: paging and filters.
    await open(`/runs/${plan.run}/sessions?limit=5`, 'sessions.png');
    const firstPage = await page.locator('#sessions tbody tr').count();
    check(firstPage === 5, 'a page holds the limit');
    const lastOnFirst = await page.locator('#sessions tbody tr td:first-child').last().innerText();
    await page.locator('a.next').first().click();
    await page.waitForLoadState('load');
    const firstOnSecond = await page.locator('#sessions tbody tr td:first-child').first().innerText();
    check(Number(firstOnSecond.slice(1)) > Number(lastOnFirst.slice(1)), `the next page starts after the first (${lastOnFirst} then ${firstOnSecond})`);
    await page.locator('a.prev').first().click();
    await page.waitForLoadState('load');
    check(await page.locator('#sessions tbody tr td:first-child').last().innerText() === lastOnFirst, 'previous goes back');
    await page.selectOption('select[name=status]', 'finished');
    await page.click('form.filters button[type=submit]');
    await page.waitForLoadState('load');
    check(page.url().includes('status=finished') && page.url().includes('limit=5'), 'a filter keeps the page size');
    check(await page.locator('#sessions tbody tr').count() === 5, 'a filtered page holds the limit');
    await open(`/runs/${plan.run}/sessions`);
    await page.selectOption('select[name=termination]', 'agent_stop');
    await page.fill('input[name=reward_min]', '1');
    await page.click('form.filters button[type=submit]');
    await page.waitForLoadState('load');
    check(page.url().includes('termination=agent_stop') && page.url().includes('reward_min=1'), 'the filter form puts the filter in the address');
    const rewards = await page.locator('#sessions tbody tr td:nth-child(6)').allInnerTexts();
    check(rewards.length === plan.successes && rewards.every(r => r === '1.000'), `the reward filter keeps the ${plan.successes} successes (${rewards.length})`);
    await open(`/runs/${plan.run}/sessions?task=1&trial=1`);
    check(await page.locator('#sessions tbody tr').count() === 1, 'task and trial pick one session');

    // A session with hostile content: shown as text, nothing of it runs.
    await open(`/sessions/${plan.hostile}`, 'session-hostile.png');
    const transcript = await text('#transcript');
    check(transcript.includes('<script>window.__pwned = 1</script>'), 'script tags are shown as text');
    check(transcript.includes('"><img src=x onerror="window.__pwned = 2">'), 'attribute breakers are shown as text');
    check(await page.evaluate(() => window.__pwned === undefined), 'no hostile script ran');
    check(await page.evaluate(() => document.scripts.length === 0), 'the page has no script element');
    check(await page.locator('#transcript img, #transcript iframe, #transcript svg').count() === 0, 'no element was injected');
    const handlers = await page.evaluate(() => [...document.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name)).filter(n => n.startsWith('on')));
    check(handlers.length === 0, 'no event-handler attribute anywhere');
    await open(`/sessions/${plan.huge}`, 'session-huge.png');
    check((await text('#transcript')).includes('more bytes not shown'), 'a huge line is cut with a note');
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    check(width <= 1280, `a huge line does not widen the page (${width})`);

    // A plain session: transcript, tool calls, figures, reward components.
    await open(`/sessions/${plan.session}`);
    check(await page.locator('.msg.user').count() >= 1 && await page.locator('.msg.assistant').count() >= 2, 'messages by role');
    check(await page.locator('.msg .tool-name').count() >= 1, 'tool calls with their names');
    check(await page.locator('.msg.tool').count() >= 1, 'tool results');
    check((await text('#calls')).includes('agent'), 'tokens and latency per model call');
    check((await text('#components')).includes('accuracy'), 'every reward component');
    check(await page.locator('#related a.compare').count() >= 1, 'links to compare with other trials');
    await page.screenshot({ path: path.join(shots, 'session.png'), fullPage: false });
    // docs/viewer.md's picture: the top of the page, down to the reward's components.
    if (plan.docs) await page.screenshot({ path: plan.docs, fullPage: true, clip: { x: 0, y: 0, width: 1280, height: 1560 } });

    // Compare: a fork beside its source, the first divergence marked.
    await open(`/compare?a=${plan.source}&b=${plan.fork}`, 'compare.png');
    check((await page.locator('main > p').first().innerText()).includes('a fork beside its source'), 'the fork is named as such');
    const diverged = await page.locator('.sbs .diverged .msg').first().getAttribute('id');
    check(diverged === `m${plan.fork_at}`, `the first divergence is marked at message ${plan.fork_at} (${diverged})`);
    await open(`/sessions/${plan.fork}`);
    await page.click('a.compare[href*="/compare"]');
    await page.waitForLoadState('load');
    check(page.url().includes('/compare?'), 'a fork links to the comparison with its source');

    // A conversation with a simulated user: its turns, and its model calls beside the agent's.
    await open(`/sessions/${plan.conversation}`, 'session-conversation.png');
    check(await page.locator('.msg.user').count() >= 2, 'the user takes turns');
    check(await page.locator('.msg.user .figures').count() >= 1, "the user's turns carry their model call's tokens and latency");
    const parties = await page.locator('#calls tbody td:nth-child(2)').allInnerTexts();
    check(parties.includes('user') && parties.includes('agent'), `model calls by party (${parties})`);

    // tau2: the session's writes, and the final database against the gold one.
    await open(`/sessions/${plan.tau2_match}`, 'session-tau2.png');
    check(await page.locator('#db-writes tbody tr').count() >= 1, 'a tau2 session lists the writes that changed its database');
    check((await text('#db-gold')).includes('equals the gold'), 'a matching final database is said to match');
    check(await page.locator('#db-diff-initial tbody tr').count() >= 1, 'the fields its writes changed are listed');
    check(await page.locator('#db-diff-gold').count() === 0, 'a matching database has no difference from the gold one');
    await open(`/sessions/${plan.tau2_differs}`, 'session-tau2-differs.png');
    check((await text('#db-gold')).includes('differs from the gold'), 'a differing final database is marked');
    check(await page.locator('#gold-missed tbody tr').count() >= 1, 'the gold actions it missed are listed');
    check(await page.locator('#db-diff-gold tbody tr').count() >= 1, 'the fields where the final database differs from the gold one are listed');

    // Bad input gets a page, not a crash.
    for (const [url, status] of [['/runs/999999', 404], ['/sessions/x', 400], [`/runs/${plan.run}/sessions?reward_min=lots`, 400], ['/compare?a=1', 400]]) {
        const response = await page.goto(base + url);
        check(response.status() === status && (await page.locator('h1').innerText()).length > 0, `${url} is a ${status} page`);
    }
    await page.screenshot({ path: path.join(shots, 'bad-request.png') });

    // A running run follows its sessions as they finish, by itself.
    if (plan.running) {
        await open(`/runs/${plan.running}`, 'running.png');
        const before = await text('#progress');
        check((await text('#status')) === 'running', 'the last run is under way');
        await page.waitForFunction(b => { const p = document.querySelector('#progress'); return p && p.innerText !== b; }, before, { timeout: 30000, polling: 250 });
        console.log(`ok the running run's page updated by itself: "${before}" -> "${await text('#progress')}"`);
    }

    check(dialogs.length === 0, `no dialog opened (${dialogs})`);
    check(errors.length === 0, `no page error (${errors})`);
    check(blocked.length === 0, `no script was even attempted (${blocked})`);
    await context.close();
}

main().catch(e => { console.error(e.stack || String(e)); process.exit(1); });
