// Progressive enhancement: the cluster page re-reads its tree every 5 s; without script it is a plain page.
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const refresh = async () => {
    try {
      const answer = await fetch(live.dataset.fragment, { credentials: "same-origin" });
      if (answer.ok) live.innerHTML = await answer.text();
    } catch (e) { /* keep the last tree */ }
  };
  setInterval(refresh, 5000);
})();
