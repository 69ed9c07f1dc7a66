document.getElementById('main')!.textContent = 'rtjob';
